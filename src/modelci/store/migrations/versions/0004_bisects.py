"""The outcomes of bisects (`bisects`, store/bisect_schema.py BisectRow), which the dashboard shows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None
#: only adds: code made before it keeps working on a history it upgraded
additive = True


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("bisects"):
        return
    op.create_table(
        "bisects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("runner", sa.String(length=200), nullable=False),
        sa.Column("workload", sa.String(length=300), nullable=False),
        sa.Column("check", sa.String(length=32), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("culprit", sa.String(length=300), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("bisects")
