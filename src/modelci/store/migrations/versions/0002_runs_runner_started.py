"""An index of each runner's run start times: the stale-runner check after every run reads each runner's first
and latest start from it instead of every run row.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
#: only adds: code made before it keeps working on a history it upgraded
additive = True


def upgrade() -> None:
    # only what is missing, as the other revisions: a history whose alembic_version was lost (emptied or dropped
    # by hand) is upgraded from nothing, and this index refused that upgrade ("already exists")
    if "ix_runs_runner_started" in {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("runs")}:
        return
    op.create_index("ix_runs_runner_started", "runs", ["runner", "started_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_runs_runner_started", table_name="runs")
