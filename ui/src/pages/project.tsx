import { useEffect, useState } from 'preact/hooks'
import { get, post, seg, taken, type Connections, type Job, type Me, type Project as P, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, Form, Table, lazy, plural, useLoad, useTitle, when } from '../ui'
import { bytes } from './overview'
import { useProjectEvents, useProjectLoad } from '../events'
import { ConnectCard } from './connect'
import type { Summary } from './home'

// The Monitoring tab (and uPlot, its charts) is a chunk of its own, fetched when the tab is opened.
const MonitoringTab = lazy(() => import('./monitoring').then((m) => m.MonitoringTab))
// The logs explorer and the databases and roles page too: the main chunk stays small.
const LogsTab = lazy(() => import('./logs').then((m) => m.LogsTab))
const DatabasesTab = lazy(() => import('./databases').then((m) => m.DatabasesTab))
// And every other tab: the main chunk carries the Overview (a project's first page) and what all pages need.
const TablesTab = lazy(() => import('./studio').then((m) => m.TablesTab))
const ImportsTab = lazy(() => import('./imports').then((m) => m.ImportsTab))
const ScheduleCard = lazy(() => import('./imports').then((m) => m.ScheduleCard))
const PreviewsTab = lazy(() => import('./previews').then((m) => m.PreviewsTab))
const KVTab = lazy(() => import('./kv').then((m) => m.KVTab))
const IntegrationsTab = lazy(() => import('./integrations').then((m) => m.IntegrationsTab))
const BackupsTab = lazy(() => import('./project_tabs').then((m) => m.BackupsTab))
const DataTab = lazy(() => import('./project_tabs').then((m) => m.DataTab))
const ExtensionsTab = lazy(() => import('./project_tabs').then((m) => m.ExtensionsTab))
const SettingsTab = lazy(() => import('./project_tabs').then((m) => m.SettingsTab))
const AuditTab = lazy(() => import('./project_tabs').then((m) => m.AuditTab))
// The home's figures (the first tab's "At a glance") too: the connection details above the fold do not wait on it.
const Home = lazy(() => import('./home').then((m) => m.Home))

export const tabs = [
  { id: '', label: 'Overview' },
  { id: 'sql', label: 'SQL' },
  { id: 'tables', label: 'Tables' },
  { id: 'databases', label: 'Databases & roles' },
  { id: 'monitoring', label: 'Monitoring' },
  { id: 'logs', label: 'Logs' },
  { id: 'backups', label: 'Backups' },
  { id: 'data', label: 'Exports' },
  { id: 'imports', label: 'Imports' },
  { id: 'previews', label: 'Previews' },
  { id: 'kv', label: 'Key-value' },
  { id: 'integrations', label: 'Integrations' },
  { id: 'extensions', label: 'Extensions' },
  { id: 'settings', label: 'Settings' },
  { id: 'audit', label: 'Audit' },
]

type Backup = Schemas['Backup']
type BackupStorage = Schemas['BackupStorage']

/** ago says how long before now iso was, roughly: "40 s", "12 min", "3 h", "2 days". */
function ago(iso: string): string {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000)
  if (s < 90) return Math.round(s) + ' s'
  if (s < 90 * 60) return Math.round(s / 60) + ' min'
  if (s < 36 * 3600) return Math.round(s / 3600) + ' h'
  return Math.round(s / 86400) + ' days'
}

/** Storage says where the project's backups live and whether its WAL reaches them (as last sampled). */
function Storage({ st }: { st: BackupStorage }) {
  const a = st.archiving
  const advanced = a?.last_archived_at ? `the archive last advanced ${ago(a.last_archived_at)} ago` : 'no WAL archived yet'
  return (
    <>
      {st.kind === 'bucket' ? (
        <p class="where">
          Backups live in <code>{st.location}</code>, a bucket off this machine: they outlive its disk.
        </p>
      ) : (
        <>
          <p class="where">
            Backups live in <code>{st.location}</code> on this machine's disk.
          </p>
          <p class="warning">Losing this machine's disk loses the backups with the database. The operator can keep them in a bucket (up --backup-store).</p>
        </>
      )}
      <dl class="facts">
        <dt>WAL archiving</dt>
        <dd>
          {!a && <span class="hint">not read yet (the appliance reads it every minute)</span>}
          {a && a.failing && (
            <>
              <Badge value="failing" />{' '}
              failing: {a.last_failed_wal} could not be archived{a.last_failed_at ? ` ${ago(a.last_failed_at)} ago` : ''}; {bytes(a.pending_bytes)} of WAL wait on this machine's disk, and {advanced}.
            </>
          )}
          {a && !a.failing && a.pending_bytes > 0 && (
            <>
              <Badge value="pending" label="waiting" /> {bytes(a.pending_bytes)} of WAL waiting on this machine's disk; {advanced}
              {st.kind === 'bucket' ? ' (it goes to the bucket within a minute).' : ' (the segment being written is archived once full).'}
            </>
          )}
          {a && !a.failing && a.pending_bytes === 0 && (
            <>
              <Badge value="healthy" label="up to date" /> {advanced}.
            </>
          )}
          {a && <div class="hint">Read {ago(a.sampled_at)} ago.</div>}
        </dd>
      </dl>
    </>
  )
}

function Backups({ id, path, active }: { id: string; path: string; active: boolean }) {
  const list = useProjectLoad(id, () => get<{ backups: Backup[]; storage: BackupStorage }>(path + '/backups'), [path])
  const [label, setLabel] = useState('')
  return (
    <section class="card">
      <h2>Backups</h2>
      {list.data && <Storage st={list.data.storage} />}
      <Form
        label="Take a backup"
        onSubmit={async () => {
          await post(path + '/backups', label ? { label } : {})
          setLabel('')
          list.reload()
        }}
      >
        <div class="row">
          <div>
            <label for="backup-label">Label (optional)</label>
            <input id="backup-label" maxLength={100} value={label} onInput={(e) => setLabel((e.target as HTMLInputElement).value)} />
          </div>
          <button type="submit" class="primary" disabled={!active}>
            Take a backup
          </button>
        </div>
      </Form>
      <ErrorBox error={list.error} />
      {list.data && list.data.backups.length === 0 && <Empty>No backups yet. Take one now; scheduled backups run daily once set up.</Empty>}
      {list.data && list.data.backups.length > 0 && (
        <Table cols={['Backup', 'State', 'Verified', { label: 'Size', sm: true }, { label: 'Taken', sm: true }]}>
            {list.data.backups.map((b) => (
              <tr key={b.id}>
                <td>
                  {b.label || <code>{b.backup_key}</code>}
                </td>
                <td>
                  <Badge value={b.state} />
                </td>
                <td>
                  <Badge value={b.verification_state} />
                  {b.verification_error && <div class="hint">{b.verification_error}</div>}
                </td>
                <td class="sm-hide">{bytes(b.size_bytes)}</td>
                <td class="sm-hide">{when(b.created_at)}</td>
              </tr>
            ))}
        </Table>
      )}
    </section>
  )
}

export function Project({ id, tab = '', me }: { id: string; tab?: string; me: Me }) {
  const path = '/v1/projects/' + seg(id)
  // Live: the project's event stream reloads what a job's end changed; a slow poll stays as a fallback
  // (runtime status changes that are not job ends, a stream that cannot connect).
  const prj = useLoad(() => get<{ project: P }>(path), [id], 10000, () => taken(path))
  const p = prj.data?.project
  const active = p?.state === 'active'
  // The connection strings follow the credential: a rotation's end (or any job's) on the event stream reads
  // them again, so what the Overview shows and copies is the current password, without a reload.
  const conns = useProjectLoad(id, () => (active ? get<{ connections: Connections }>(path + '/connections') : Promise.resolve(undefined)), [id, active], () =>
    active ? taken(path + '/connections') : undefined,
  )
  const [jobLimit, setJobLimit] = useState(10)
  const jobs = useProjectLoad(id, () => get<{ jobs: Job[] }>(path + '/jobs?limit=' + jobLimit), [id, jobLimit], () => taken(path + '/jobs?limit=' + jobLimit))
  // The home's figures, and the alerts in force that badge the Monitoring tab on every tab: one read of the
  // appliance's records, in parallel with the project's (alert events reload it).
  const summary = useProjectLoad(id, () => get<{ summary: Summary }>(path + '/summary'), [id])
  const alerts = summary.data?.summary.open_alerts.length ?? 0
  useProjectEvents(id, () => prj.reload())
  const tabLabel = tabs.find((t) => t.id === tab)?.label
  useTitle(p ? (tab && tabLabel ? `${tabLabel} · ${p.name}` : p.name) : prj.error ? 'Project not found' : 'Project')
  return (
    <main>
      <p class="crumbs">
        <a href="/projects">Projects</a> /
      </p>
      {!p && prj.error && <h1>{prj.error.includes('not found') ? 'Project not found' : 'Project'}</h1>}
      <ErrorBox error={prj.error} />
      {p && (
        <>
          <h1>{p.name}</h1>
          <nav class="tabs" aria-label="Project">
            {tabs.map((t) => (
              <a href={'/projects/' + id + (t.id ? '/' + t.id : '')} aria-current={t.id === tab ? 'page' : undefined}>
                {t.label}
                {t.id === 'monitoring' && alerts > 0 && (
                  <span class="count-badge" title={plural(alerts, 'alert') + ' in force'}>
                    {alerts}
                    <span class="visually-hidden"> {alerts === 1 ? 'alert' : 'alerts'} in force</span>
                  </span>
                )}
              </a>
            ))}
          </nav>
          {tab === '' && <Home p={p} summary={summary.data?.summary} error={summary.error} me={me} active={active} />}
          {tab === '' && <Overview p={p} active={active} conns={conns} />}
          {tab === 'backups' && (
            <>
              <Backups id={id} path={path} active={active} />
              <ScheduleCard path={path} me={me} />
              <BackupsTab path={path} project={p} me={me} />
            </>
          )}
          {tab === 'sql' && <LazySQLEditor id={id} path={path} active={active} />}
          {tab === 'tables' && <TablesTab id={id} path={path} active={active} />}
          {tab === 'databases' && <DatabasesTab path={path} active={active} me={me} />}
          {tab === 'monitoring' && <MonitoringTab id={id} path={path} />}
          {tab === 'logs' && <LogsTab id={id} path={path} />}
          {tab === 'data' && <DataTab id={id} path={path} />}
          {tab === 'imports' && <ImportsTab path={path} projectName={p.name} me={me} />}
          {tab === 'previews' && <PreviewsTab id={id} path={path} active={active} me={me} projectName={p.name} />}
          {tab === 'kv' && <KVTab id={id} path={path} orgID={p.organization_id} active={active} />}
          {tab === 'integrations' && <IntegrationsTab id={id} path={path} />}
          {tab === 'extensions' && <ExtensionsTab path={path} />}
          {tab === 'settings' && <SettingsTab path={path} project={p} reload={prj.reload} me={me} />}
          {tab === 'audit' && <AuditTab path={path} orgID={p.organization_id} />}
        </>
      )}
      {tab === '' && <Jobs jobs={jobs} more={jobs.data?.jobs.length === jobLimit && jobLimit < 200 ? () => setJobLimit(Math.min(200, jobLimit * 2)) : undefined} />}
    </main>
  )
}

function Overview({ p, active, conns }: { p: P; active: boolean; conns: ReturnType<typeof useLoad<{ connections: Connections } | undefined>> }) {
  return (
        <>
          <dl class="facts">
            <dt>State</dt>
            <dd>
              <Badge value={p.state} />
            </dd>
            <dt>Runtime</dt>
            <dd>
              <Badge value={p.runtime_status} />
            </dd>
            <dt>PostgreSQL</dt>
            <dd>{p.postgres_version || '-'}</dd>
            <dt>Environment</dt>
            <dd>{p.environment}</dd>
            <dt>Plan</dt>
            <dd>{p.plan}</dd>
            <dt>Created</dt>
            <dd>{when(p.created_at)}</dd>
          </dl>
          <ConnectCard path={'/v1/projects/' + seg(p.id)} conns={conns.data?.connections} error={conns.error} active={active} />
        </>
  )
}

function Jobs({ jobs, more }: { jobs: ReturnType<typeof useLoad<{ jobs: Job[] }>>; more?: () => void }) {
  return (
      <section class="card">
        <h2>Jobs</h2>
        <ErrorBox error={jobs.error} />
        {jobs.data && (
          <Table cols={['Type', 'State', { label: 'Started', sm: true }]}>
              {jobs.data.jobs.map((j) => [
                <tr key={j.id} class={j.error ? 'has-detail' : ''}>
                  <td>{j.type}</td>
                  <td>
                    <Badge value={j.state} />
                  </td>
                  <td class="sm-hide">{when(j.created_at)}</td>
                </tr>,
                j.error && (
                  <tr key={j.id + '-error'} class="detail">
                    <td colSpan={3} class="job-error">
                      {j.error}
                      {j.last_stderr && <pre>{j.last_stderr}</pre>}
                    </td>
                  </tr>
                ),
              ])}
          </Table>
        )}
        {more && (
          <button class="spaced" onClick={more}>
            Show more
          </button>
        )}
      </section>
  )
}

/** LazySQLEditor loads the SQL editor (CodeMirror and all) on first use, out of the main chunk. */
function LazySQLEditor(props: { id: string; path: string; active: boolean }) {
  const [mod, setMod] = useState<typeof import('./sqleditor') | null>(null)
  const [error, setError] = useState('')
  useEffect(() => {
    import('./sqleditor').then(setMod, (e) => setError('The SQL editor could not be loaded: ' + String(e)))
  }, [])
  if (mod) return <mod.SQLEditor {...props} />
  return error ? <ErrorBox error={error} /> : <p class="loading">Loading the SQL editor…</p>
}
