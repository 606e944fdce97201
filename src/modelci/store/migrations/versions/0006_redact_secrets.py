"""Take the passwords out of what earlier versions stored as given: the command line of each run (`--db` with the
history's password), a target's spec and a bisect's candidates and command (a token in a repository's URL). They
are shown by `show`, the report files and the published dashboard; modelci now stores them redacted
(records.redacted), and this revision redacts what was stored before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

from modelci.records import redacted, redacted_json

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
#: changes no table: code made before it reads and writes the history as before
additive = True

#: only a text holding a URL can hold a URL's password or secret query argument
_URL = "%://%"


def upgrade() -> None:
    bind = op.get_bind()
    for table, key, column in (("runs", "id", "command"), ("targets", "id", "spec"), ("bisects", "id", "command")):
        rows = sa.table(table, sa.column(key, sa.Integer), sa.column(column, sa.Text))
        found = bind.execute(sa.select(rows.c[key], rows.c[column]).where(rows.c[column].like(_URL))).all()
        for row_id, text in found:
            if redacted(text) != text:
                bind.execute(rows.update().where(rows.c[key] == row_id).values({column: redacted(text)}))
    bisects = sa.table("bisects", sa.column("id", sa.Integer), sa.column("result", sa.JSON))
    for row_id, result in bind.execute(sa.select(bisects.c.id, bisects.c.result)).all():
        if result is not None and redacted_json(result) != result:
            bind.execute(bisects.update().where(bisects.c.id == row_id).values(result=redacted_json(result)))


def downgrade() -> None:
    """Nothing to undo: the passwords are gone."""
