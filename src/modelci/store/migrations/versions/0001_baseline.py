"""The baseline: the schema as modelci made it before schema revisions (`schema_info` version 1).

It creates only what is missing, so the same revision makes a new history and adopts one that the hand-written
schema code made (which created some tables, the alarm, compat and noise-profile ones, in later releases of that
version, and some covering indexes too).

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None
#: only adds: code made before it keeps working on a history it upgraded
additive = True


def _existing() -> tuple[set[str], dict[str, set[str]]]:
    inspector = sa.inspect(op.get_bind())
    tables = set(inspector.get_table_names())
    return tables, {t: {i["name"] for i in inspector.get_indexes(t)} for t in tables}


def upgrade() -> None:
    tables, indexes = _existing()

    def _table(name: str, *columns) -> None:
        if name not in tables:
            op.create_table(name, *columns)
            indexes[name] = set()

    def _index(table: str, name: str, columns: list[str], **kwargs) -> None:
        if name not in indexes[table]:
            op.create_index(name, table, columns, **kwargs)

    _table('artifacts',
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('sha256')
    )
    _table('compat_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('check_id', sa.String(length=32), nullable=False),
    sa.Column('direction', sa.String(length=16), nullable=False),
    sa.Column('runner', sa.String(length=200), nullable=False),
    sa.Column('consumer_name', sa.String(length=200), nullable=False),
    sa.Column('consumer_version', sa.String(length=100), nullable=False),
    sa.Column('consumer_label', sa.Text(), nullable=False),
    sa.Column('producer_name', sa.String(length=200), nullable=False),
    sa.Column('producer_version', sa.String(length=100), nullable=False),
    sa.Column('producer_label', sa.Text(), nullable=False),
    sa.Column('workload', sa.String(length=300), nullable=False),
    sa.Column('format', sa.String(length=64), nullable=False),
    sa.Column('saved_model_key', sa.String(length=64), nullable=False),
    sa.Column('model_sha256', sa.String(length=64), nullable=False),
    sa.Column('outcome', sa.String(length=24), nullable=False),
    sa.Column('gating', sa.Boolean(), nullable=False),
    sa.Column('unsafe', sa.Boolean(), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('numbers', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    _index('compat_results', 'ix_compat_results_check_id', ['check_id'], unique=False)
    _index('compat_results', 'ix_compat_results_consumer_name', ['consumer_name'], unique=False)
    _index('compat_results', 'ix_compat_results_workload', ['workload'], unique=False)

    _table('environments',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('python', sa.Text(), nullable=False),
    sa.Column('isolated', sa.Boolean(), nullable=False),
    sa.Column('lock', sa.Text(), nullable=False),
    sa.Column('fingerprint', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    _table('schema_info',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    _table('targets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('spec', sa.Text(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.String(length=100), nullable=False),
    sa.Column('commit', sa.String(length=64), nullable=False),
    sa.Column('wheel_sha256', sa.String(length=64), nullable=False),
    sa.Column('commit_date', sa.String(length=40), nullable=False),
    sa.Column('subject', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('kind', 'name', 'version', 'commit', 'wheel_sha256', name='uq_target')
    )
    _table('noise_profiles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('runner', sa.String(length=200), nullable=False),
    sa.Column('workload', sa.String(length=300), nullable=False),
    sa.Column('metric', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('target_id', sa.Integer(), nullable=False),
    sa.Column('environment_id', sa.String(length=64), nullable=False),
    sa.Column('runs', sa.Integer(), nullable=False),
    sa.Column('cv', sa.Float(), nullable=True),
    sa.Column('cv_within', sa.Float(), nullable=True),
    sa.Column('spread_rtol', sa.Float(), nullable=True),
    sa.Column('bit_identical', sa.Boolean(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['target_id'], ['targets.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('noise_profiles', 'ix_noise_runner_workload', ['runner', 'workload', 'created_at'], unique=False)

    _table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('target_id', sa.Integer(), nullable=False),
    sa.Column('environment_id', sa.String(length=64), nullable=False),
    sa.Column('runner', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('suites', sa.JSON(), nullable=False),
    sa.Column('selection', sa.Text(), nullable=False),
    sa.Column('command', sa.Text(), nullable=False),
    sa.Column('modelci_version', sa.String(length=40), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['environment_id'], ['environments.id'], ),
    sa.ForeignKeyConstraint(['target_id'], ['targets.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('runs', 'ix_runs_runner', ['runner'], unique=False)
    _index('runs', 'ix_runs_target_id', ['target_id'], unique=False)

    _table('results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('workload', sa.String(length=300), nullable=False),
    sa.Column('code_hash', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('traceback', sa.Text(), nullable=False),
    sa.Column('stderr_tail', sa.Text(), nullable=False),
    sa.Column('framework', sa.String(length=40), nullable=False),
    sa.Column('domain', sa.String(length=40), nullable=False),
    sa.Column('duration', sa.Float(), nullable=False),
    sa.Column('info', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('results', 'ix_results_run_id', ['run_id'], unique=False)
    _index('results', 'ix_results_workload_run', ['workload', 'run_id', 'status'], unique=False)
    _index('results', 'ix_results_workload_status', ['workload', 'status'], unique=False)

    _table('run_fingerprints',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('run_id')
    )
    _table('alarms',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=800), nullable=False),
    sa.Column('runner', sa.String(length=200), nullable=False),
    sa.Column('workload', sa.String(length=300), nullable=False),
    sa.Column('check', sa.String(length=32), nullable=False),
    sa.Column('metric', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('recovered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('recovered_runs', sa.Integer(), nullable=False),
    sa.Column('silenced_until', sa.Date(), nullable=True),
    sa.Column('target_id', sa.Integer(), nullable=True),
    sa.Column('target_label', sa.String(length=300), nullable=False),
    sa.Column('last_target_label', sa.String(length=300), nullable=False),
    sa.Column('first_run_id', sa.Integer(), nullable=True),
    sa.Column('last_run_id', sa.Integer(), nullable=True),
    sa.Column('baseline_result_id', sa.Integer(), nullable=True),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('numbers', sa.JSON(), nullable=False),
    sa.Column('first_numbers', sa.JSON(), nullable=False),
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('acknowledged_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('acknowledged_by', sa.String(length=200), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resolved_by', sa.String(length=200), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['baseline_result_id'], ['results.id'], ),
    sa.ForeignKeyConstraint(['first_run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['last_run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['target_id'], ['targets.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('alarms', 'ix_alarms_runner', ['runner'], unique=False)
    _index('alarms', 'ix_alarms_state', ['state'], unique=False)
    _index('alarms', 'ix_alarms_target_id', ['target_id'], unique=False)
    _index('alarms', 'uq_alarms_live_key', ['key'], unique=True, sqlite_where=sa.text("state != 'resolved'"), postgresql_where=sa.text("state != 'resolved'"))

    _table('findings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('result_id', sa.Integer(), nullable=False),
    sa.Column('baseline_result_id', sa.Integer(), nullable=True),
    sa.Column('check', sa.String(length=32), nullable=False),
    sa.Column('metric', sa.String(length=200), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=False),
    sa.Column('gating', sa.Boolean(), nullable=False),
    sa.Column('numbers', sa.JSON(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['baseline_result_id'], ['results.id'], ),
    sa.ForeignKeyConstraint(['result_id'], ['results.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('findings', 'ix_findings_result_id', ['result_id'], unique=False)

    _table('metrics',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('result_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('unit', sa.String(length=16), nullable=False),
    sa.Column('values', sa.JSON(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('median', sa.Float(), nullable=True),
    sa.Column('minimum', sa.Float(), nullable=True),
    sa.Column('maximum', sa.Float(), nullable=True),
    sa.Column('final', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['result_id'], ['results.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('metrics', 'ix_metrics_name_result', ['name', 'result_id'], unique=False)
    _index('metrics', 'ix_metrics_name_result_summary', ['name', 'result_id', 'kind', 'unit', 'median', 'minimum', 'maximum', 'final', 'n'], unique=False)
    _index('metrics', 'ix_metrics_result_id', ['result_id'], unique=False)

    _table('outputs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('result_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('dtype', sa.String(length=40), nullable=False),
    sa.Column('shape', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['result_id'], ['results.id'], ),
    sa.ForeignKeyConstraint(['sha256'], ['artifacts.sha256'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('outputs', 'ix_outputs_result_id', ['result_id'], unique=False)

    _table('saved_models',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('producer_kind', sa.String(length=16), nullable=False),
    sa.Column('producer_name', sa.String(length=200), nullable=False),
    sa.Column('producer_version', sa.String(length=100), nullable=False),
    sa.Column('producer_commit', sa.String(length=64), nullable=False),
    sa.Column('producer_wheel_sha256', sa.String(length=64), nullable=False),
    sa.Column('producer_label', sa.Text(), nullable=False),
    sa.Column('workload', sa.String(length=300), nullable=False),
    sa.Column('code_hash', sa.String(length=64), nullable=False),
    sa.Column('format', sa.String(length=64), nullable=False),
    sa.Column('layout', sa.String(length=8), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('unsafe', sa.Boolean(), nullable=False),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('inputs', sa.JSON(), nullable=False),
    sa.Column('outputs', sa.JSON(), nullable=False),
    sa.Column('fingerprint', sa.JSON(), nullable=False),
    sa.Column('environment_id', sa.String(length=64), nullable=False),
    sa.Column('result_id', sa.Integer(), nullable=True),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['result_id'], ['results.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key')
    )
    _index('saved_models', 'ix_saved_models_producer_name', ['producer_name'], unique=False)
    _index('saved_models', 'ix_saved_models_workload', ['workload'], unique=False)

    _table('alarm_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('alarm_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('event', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('by', sa.String(length=200), nullable=False),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['alarm_id'], ['alarms.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    _index('alarm_events', 'ix_alarm_events_alarm_id', ['alarm_id'], unique=False)

    info = sa.table("schema_info", sa.column("id", sa.Integer), sa.column("version", sa.Integer),
                    sa.column("created_at", sa.DateTime(timezone=True)))
    if op.get_bind().execute(sa.select(sa.func.count()).select_from(info)).scalar() == 0:
        op.bulk_insert(info, [{"id": 1, "version": 1, "created_at": datetime.now(timezone.utc)}])


def downgrade() -> None:
    raise RuntimeError("the baseline schema holds the whole history; it is never undone")
