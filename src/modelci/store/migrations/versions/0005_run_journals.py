"""The journal each run was kept in while it ran (`run_journals`, store/schema.py RunJournalRow), so that the
recovery of a killed run's journal can tell a run that was stored already; and the history's own id
(`history_identity`, HistoryRow), which names it in those journals.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None
#: only adds: code made before it keeps working on a history it upgraded (it writes no row here, and its
#: journals are recovered as before)
additive = True


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("history_identity"):
        history = op.create_table("history_identity", sa.Column("id", sa.String(length=32), nullable=False),
                                  sa.PrimaryKeyConstraint("id"))
        op.bulk_insert(history, [{"id": uuid.uuid4().hex}])
    if sa.inspect(op.get_bind()).has_table("run_journals"):
        return
    op.create_table(
        "run_journals",
        sa.Column("journal", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("journal"),
    )
    op.create_index("ix_run_journals_run_id", "run_journals", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_run_journals_run_id", table_name="run_journals")
    op.drop_table("run_journals")
    op.drop_table("history_identity")
