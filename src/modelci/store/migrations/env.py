"""Alembic's environment for the history: migrations run on the connection the store hands over (it holds the
schema lock, so one process migrates while the others wait), against the declarative metadata of every table."""

from alembic import context

from modelci.store.schema import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                  compare_type=True)
with context.begin_transaction():
    context.run_migrations()
