import { AuditFilters } from '../auditfilter'
import { useState } from 'preact/hooks'
import { del, get, patch, post, seg, type Job, type Me, type Project, type Schemas } from '../api'
import { useProjectLoad } from '../events'
import { JobProgress } from '../job'
import { navigate } from '../router'
import { AdminOnly, Badge, Empty, ErrorBox, Form, isOrgAdmin, message, Table, useAction, useLoad, when } from '../ui'
import { bytes } from './overview'
import { usePlanNames } from './operator_plans'
import { Upgrades } from './upgrades'

type Started = { id: string; label: string } | null

/** useJob keeps the job a tab started, to follow it. */
function useJob(): [Started, (label: string, p: Promise<{ job: Job }>) => Promise<void>] {
  const [job, setJob] = useState<Started>(null)
  return [job, async (label, p) => setJob({ id: (await p).job.id, label })]
}

type RestorePoint = Schemas['RestorePoint']

export function BackupsTab({ path, project, me }: { path: string; project: Project; me: Me }) {
  const points = useProjectLoad(project.id, () => get<{ restore_points: RestorePoint[]; pitr_window_days: number }>(path + '/restore-points'), [path])
  const [label, setLabel] = useState('')
  const [kind, setKind] = useState<'time' | 'point'>('time')
  const [time, setTime] = useState('')
  const [point, setPoint] = useState('')
  const [confirmName, setConfirmName] = useState('')
  const [job, start] = useJob()
  const [error, act] = useAction()
  const windowDays = points.data?.pitr_window_days ?? 0
  const min = new Date(Date.now() - windowDays * 86400000)
  const local = (d: Date) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16)
  const chosen = points.data?.restore_points.find((p) => p.id === point)
  const target = kind === 'time' ? (time ? new Date(time).toLocaleString() : 'the chosen time') : chosen ? `the restore point “${chosen.label}”` : 'the chosen restore point'
  return (
    <>
      <section class="card">
        <h2>Restore points</h2>
        <Form
          label="Create a restore point"
          onSubmit={async () => {
            await post(path + '/restore-points', { label })
            setLabel('')
            points.reload()
          }}
        >
          <div class="row">
            <div>
              <label for="rp-label">Label</label>
              <input id="rp-label" required maxLength={100} value={label} onInput={(e) => setLabel((e.target as HTMLInputElement).value)} />
            </div>
            <button type="submit" class="primary">
              Create restore point
            </button>
          </div>
        </Form>
        <ErrorBox error={points.error || error} />
        {points.data && points.data.restore_points.length === 0 && <Empty>No restore points: name the moment before a risky change to come back to it.</Empty>}
        {points.data && points.data.restore_points.length > 0 && (
          <Table cols={['Restore point', 'Time', { label: 'Actions', hidden: true }]}>
              {points.data.restore_points.map((rp) => (
                <tr key={rp.id}>
                  <td>{rp.label}</td>
                  <td>{when(rp.pitr_time)}</td>
                  <td>
                    <button
                      aria-label={'Delete restore point ' + rp.label}
                      onClick={() =>
                        act(async () => {
                          await del(path + '/restore-points/' + seg(rp.id))
                          points.reload()
                        })
                      }
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
          </Table>
        )}
      </section>
      <section class="card">
        <h2>Restore</h2>
        <p class="hint">
          {points.data && (windowDays > 0 ? `The point-in-time window reaches back ${windowDays} day(s), to the oldest backup. ` : 'The point-in-time window starts at the oldest backup, taken today. ')}
          A restore replaces the database: the current data is kept until the restored server is up, so a failed restore loses nothing.
        </p>
        <AdminOnly me={me} what="restore the project">
        {!points.data && !points.error && <p class="loading">Reading the restore window…</p>}
        {points.data && (
        <Form
          label="Restore the project"
          onSubmit={async () => {
            if (confirmName !== project.name) throw new Error('type the project name to confirm')
            const body = kind === 'time' ? { restore_time: new Date(time).toISOString() } : { restore_point_id: point }
            await start('Restore', post(path + '/restores', body))
            setConfirmName('')
          }}
        >
          <fieldset class="scopes">
            <legend>Restore to</legend>
            <label class="check">
              <input type="radio" name="restore-kind" checked={kind === 'time'} onChange={() => setKind('time')} /> a time
            </label>
            <label class="check">
              <input type="radio" name="restore-kind" checked={kind === 'point'} onChange={() => setKind('point')} /> a restore point
            </label>
          </fieldset>
          {kind === 'time' ? (
            <>
              <label for="restore-time">Time (your local time)</label>
              <input id="restore-time" type="datetime-local" required min={local(min)} max={local(new Date())} value={time} onInput={(e) => setTime((e.target as HTMLInputElement).value)} />
            </>
          ) : (
            <>
              <label for="restore-point">Restore point</label>
              <select id="restore-point" required value={point} onChange={(e) => setPoint((e.target as HTMLSelectElement).value)}>
                <option value="">choose…</option>
                {points.data?.restore_points.map((rp) => (
                  <option value={rp.id}>
                    {rp.label} ({when(rp.pitr_time)})
                  </option>
                ))}
              </select>
            </>
          )}
          <p class="warning">Everything written to {project.name} after {target} will be lost.</p>
          <label for="restore-confirm">Type the project name, {project.name}, to confirm</label>
          <input id="restore-confirm" required value={confirmName} onInput={(e) => setConfirmName((e.target as HTMLInputElement).value)} />
          <button type="submit" class="danger spaced">
            Restore
          </button>
        </Form>
        )}
        </AdminOnly>
        {job && <JobProgress id={job.id} label={job.label} />}
      </section>
    </>
  )
}

type Export = Schemas['Export']

export function DataTab({ id, path }: { id: string; path: string }) {
  const list = useProjectLoad(id, () => get<{ exports: Export[] }>(path + '/exports'), [path])
  const [job, start] = useJob()
  const [error, act] = useAction()
  return (
    <section class="card">
      <h2>Exports</h2>
      <p class="hint">A dump of the database (pg_dump custom format, for pg_restore), kept 7 days.</p>
      <button class="primary" onClick={() => act(() => start('Export', post(path + '/exports')))}>
        Export now
      </button>
      {job && <JobProgress id={job.id} label={job.label} />}
      <ErrorBox error={list.error || error} />
      {list.data && list.data.exports.length === 0 && <Empty>No exports yet.</Empty>}
      {list.data && list.data.exports.length > 0 && (
        <Table cols={['Export', 'State', 'Size', { label: 'Actions', hidden: true }]}>
            {list.data.exports.map((x) => (
              <tr key={x.id}>
                <td>{when(x.created_at)}</td>
                <td>
                  <Badge value={x.state} />
                </td>
                <td>{bytes(x.size_bytes)}</td>
                <td>
                  {x.state === 'completed' && (
                    <button
                      aria-label={'Download export of ' + when(x.created_at)}
                      onClick={() =>
                        act(async () => {
                          const d = await get<{ download: { download_url: string } }>(path + '/exports/' + seg(x.id) + '/download')
                          location.assign(d.download.download_url)
                        })
                      }
                    >
                      Download
                    </button>
                  )}
                </td>
              </tr>
            ))}
        </Table>
      )}
    </section>
  )
}

type Extension = Schemas['Extension']

export function ExtensionsTab({ path }: { path: string }) {
  const list = useLoad(() => get<{ extensions: Extension[] }>(path + '/extensions'), [path])
  const [job, start] = useJob()
  const [error, setError] = useState('')
  const [filter, setFilter] = useState('')
  const act = (label: string, p: () => Promise<{ job: Job }>) => {
    setError('')
    start(label, p()).then(() => setTimeout(list.reload, 1500), (e) => setError(message(e)))
  }
  const shown = list.data?.extensions.filter((x) => x.name.includes(filter) || x.description.toLowerCase().includes(filter.toLowerCase())) ?? []
  return (
    <section class="card">
      <h2>Extensions</h2>
      <label for="ext-filter">Find</label>
      <input id="ext-filter" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
      {job && <JobProgress id={job.id} label={job.label} />}
      <ErrorBox error={list.error || error} />
      <Table cols={['Extension', { label: 'Version', sm: true }, { label: 'Actions', hidden: true }]}>
          {shown.map((x) => (
            <tr key={x.name}>
              <td>
                <strong>{x.name}</strong> <span class="hint">{x.category}</span>
                <div class="hint">{x.description}</div>
              </td>
              <td class="sm-hide">{x.enabled ? x.installed_version : x.available_version}</td>
              <td class="actions-cell">
                <div class="cell-actions">
                {!x.enabled && (
                  <button onClick={() => act('Enable ' + x.name, () => post(path + '/extensions', { name: x.name }))} aria-label={'Enable ' + x.name}>
                    Enable{x.requires_restart ? ' (restarts)' : ''}
                  </button>
                )}
                {x.enabled && x.update_available && (
                  <button onClick={() => act('Update ' + x.name, () => post(path + '/extensions/' + seg(x.name) + '/update'))} aria-label={'Update ' + x.name}>
                    Update
                  </button>
                )}
                {x.enabled && x.name !== 'plpgsql' && (
                  <button onClick={() => act('Disable ' + x.name, () => del(path + '/extensions/' + seg(x.name)))} aria-label={'Disable ' + x.name}>
                    Disable
                  </button>
                )}
                </div>
              </td>
            </tr>
          ))}
      </Table>
    </section>
  )
}

export function SettingsTab({ path, project, reload, me }: { path: string; project: Project; reload: () => void; me: Me }) {
  const [name, setName] = useState(project.name)
  const [environment, setEnvironment] = useState<string>(project.environment)
  const [plan, setPlan] = useState<string>(project.plan)
  const planNames = usePlanNames(project.plan)
  const [st, setSt] = useState<string>(project.statement_timeout ?? '')
  const [it, setIt] = useState<string>(project.idle_transaction_timeout ?? '')
  const [sleep, setSleep] = useState<string>(String(project.suspend_after_seconds ?? 0))
  const [saved, setSaved] = useState('')
  const [overlap, setOverlap] = useState('3600')
  const [job, start] = useJob()
  const [confirmName, setConfirmName] = useState('')
  return (
    <>
      <section class="card">
        <h2>Settings</h2>
        {saved && <p role="status">{saved}</p>}
        <Form
          label="Project settings"
          onSubmit={async () => {
            const body: Record<string, string | number> = { name, environment, plan }
            if (st) body.statement_timeout = st
            if (it) body.idle_transaction_timeout = it
            if (sleep !== '' && Number(sleep) !== project.suspend_after_seconds) body.suspend_after_seconds = Number(sleep)
            const res = await patch<{ project: Project }>(path, body)
            setSaved(res.project.latest_job_id ? 'Saved; the server applies the change (see Jobs).' : 'Saved.')
            reload()
          }}
        >
          <div class="row">
            <div>
              <label for="set-name">Name</label>
              <input id="set-name" required maxLength={63} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="set-env">Environment</label>
              <select id="set-env" value={environment} onChange={(e) => setEnvironment((e.target as HTMLSelectElement).value)}>
                {['development', 'staging', 'production'].map((v) => (
                  <option value={v}>{v}</option>
                ))}
              </select>
            </div>
            <div>
              <label for="set-plan">Plan</label>
              <select id="set-plan" value={plan} onChange={(e) => setPlan((e.target as HTMLSelectElement).value)}>
                {planNames.map((v) => (
                  <option value={v}>{v}</option>
                ))}
              </select>
            </div>
          </div>
          <div class="row">
            <div>
              <label for="set-st">Statement timeout (e.g. 30s, 5min, 0 for none)</label>
              <input id="set-st" value={st} onInput={(e) => setSt((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="set-it">Idle-in-transaction timeout</label>
              <input id="set-it" value={it} onInput={(e) => setIt((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="set-sleep">Suspend after idle (seconds, 0 for never)</label>
              <input
                id="set-sleep"
                type="number"
                min={0}
                max={2592000}
                aria-describedby="set-sleep-hint"
                value={sleep}
                onInput={(e) => setSleep((e.target as HTMLInputElement).value)}
              />
            </div>
            <button type="submit" class="primary">
              Save
            </button>
          </div>
          <p class="hint" id="set-sleep-hint">
            Suspend after idle: with no connection and no job for this long, the server and its pooler stop; the next connection wakes them in a
            moment.
          </p>
        </Form>
      </section>
      <section class="card">
        <h2>Credentials</h2>
        <p class="hint">A rotation gives the database a new password; the old one keeps working for the overlap, then its sessions end.</p>
        <Form
          label="Rotate the credentials"
          onSubmit={async () => {
            const during = Number(overlap) > 0 ? `keeps working for ${overlap} s` : 'stops working at once, and its sessions end'
            if (!confirm(`Rotate the database password? The current one ${during}: the connection strings change.`)) return
            await start('Rotation', post(path + '/credentials/rotate', { overlap_seconds: Number(overlap) }))
          }}
        >
          <div class="row">
            <div>
              <label for="rot-overlap">Overlap in seconds</label>
              <input id="rot-overlap" type="number" min={0} max={604800} value={overlap} onInput={(e) => setOverlap((e.target as HTMLInputElement).value)} />
            </div>
            <button type="submit" class="primary">
              Rotate password
            </button>
          </div>
        </Form>
        {job && <JobProgress id={job.id} label={job.label} />}
      </section>
      <Upgrades path={path} version={project.postgres_version} admin={isOrgAdmin(me)} />
      <section class="card danger-zone">
        <h2>Delete the project</h2>
        <p class="warning">Deleting {project.name} deletes its database and its backups. It cannot be undone.</p>
        <AdminOnly me={me} what="delete the project">
        <Form
          label="Delete the project"
          onSubmit={async () => {
            if (confirmName !== project.name) throw new Error('type the project name to confirm')
            let q = ''
            if (project.environment === 'production') {
              const a = await post<{ approval: { token: string } }>(path + '/approvals', { action: 'project.delete' })
              q = '?approval_token=' + encodeURIComponent(a.approval.token)
            }
            await del(path + q)
            navigate('/projects')
          }}
        >
          <label for="del-confirm">Type the project name, {project.name}, to confirm{project.environment === 'production' ? ' (a production project: an approval is minted for it)' : ''}</label>
          <input id="del-confirm" required value={confirmName} onInput={(e) => setConfirmName((e.target as HTMLInputElement).value)} />
          <button type="submit" class="danger spaced">
            Delete project
          </button>
        </Form>
        </AdminOnly>
      </section>
    </>
  )
}

type AuditEvent = Schemas['AuditEvent']

/** useActors names the organization's people (name and email) and API keys by their IDs, for the audit. A
 * caller that may not list them (a project-scoped key) sees the IDs. */
function useActors(orgID: string) {
  const org = '/v1/organizations/' + seg(orgID)
  const members = useLoad(() => get<{ members: Schemas['Member'][] }>(org + '/members').catch(() => ({ members: [] })), [orgID])
  const keys = useLoad(() => get<{ api_keys: Schemas['APIKey'][] }>(org + '/api-keys').catch(() => ({ api_keys: [] })), [orgID])
  return (kind: string, id: string) => {
    if (kind === 'user') {
      const m = members.data?.members.find((x) => x.user_id === id)
      if (m) return m.name ? `${m.name} <${m.email}>` : m.email
    }
    if (kind === 'api_key') {
      const k = keys.data?.api_keys.find((x) => x.id === id)
      if (k) return `API key “${k.name}”`
    }
    if (kind === 'system') return 'the appliance'
    return `${kind} ${id}`
  }
}

export function AuditTab({ path, orgID }: { path: string; orgID: string }) {
  const [limit, setLimit] = useState(25)
  const [filter, setFilter] = useState('')
  const list = useLoad(() => get<{ audit_events: AuditEvent[] }>(path + '/audit-events?limit=' + limit + filter), [path, limit, filter])
  const events = list.data?.audit_events ?? []
  const actor = useActors(orgID)
  return (
    <section class="card">
      <h2>Audit events</h2>
      <AuditFilters onChange={setFilter} />
      <ErrorBox error={list.error} />
      <Table cols={['When', 'Action', { label: 'By', sm: true }]}>
          {events.map((a) => (
            <tr key={a.id}>
              <td>{when(a.created_at)}</td>
              <td>{a.action}</td>
              <td class="sm-hide" title={a.actor_id}>
                {actor(a.actor_kind, a.actor_id)}
              </td>
            </tr>
          ))}
      </Table>
      {events.length === limit && limit < 200 && (
        <button class="spaced" onClick={() => setLimit(Math.min(200, limit * 2))}>
          Show more
        </button>
      )}
    </section>
  )
}
