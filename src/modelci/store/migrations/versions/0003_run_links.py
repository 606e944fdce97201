"""The links of confirmation runs to the run they confirm (`run_links`, store/schema.py RunLinkRow).

Created only where missing: a history opened by a modelci from between the table and this revision has it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None
#: only adds: code made before it keeps working on a history it upgraded
additive = True


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("run_links"):
        return
    op.create_table(
        "run_links",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("parent_run_id", sa.Integer(), nullable=True),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(["parent_run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_index("ix_run_links_parent_run_id", "run_links", ["parent_run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_run_links_parent_run_id", table_name="run_links")
    op.drop_table("run_links")
