import { useState } from 'preact/hooks'
import { get, post, seg, type Job, type Schemas } from '../api'
import { JobProgress, readable } from '../job'
import { Badge, Empty, ErrorBox, Form, Table, useAction, useLoad, when } from '../ui'
import { bytes } from './overview'

type Majors = Schemas['MajorUpgrades']
type Pending = Schemas['PendingUpgrade']
type Started = { id: string; label: string }

// The jobs of a major upgrade's steps (appliance/upgrades).
const majorSteps: Record<string, string> = {
  'project.upgrade_major_preflight': 'Preflight',
  'project.upgrade_major': 'Major upgrade',
  'project.upgrade_major_confirm': 'Confirm',
  'project.upgrade_major_rollback': 'Rollback',
}
const ended = (s: string) => s === 'completed' || s === 'failed'

const methodText: Record<string, string> = {
  logical: 'logical replication: the project keeps serving while a new server copies and follows it; writes pause for a moment at the cutover',
  pg_upgrade: 'pg_upgrade: the server stops for the upgrade',
}

/** rollbackText says what a rollback keeps, by the method of the upgrade awaiting it. */
function rollbackText(p: Pending): string {
  return p.method === 'logical'
    ? `A rollback returns to PostgreSQL ${p.previous_major} with the rows written since the cutover (the old server follows the new one); not schema changes, new databases or large objects made since.`
    : `A rollback returns to PostgreSQL ${p.previous_major} as it was before the upgrade: what was written since is lost.`
}

/** Upgrades: a restart onto the installed minor release, and the steps of a major upgrade: the majors
 * installed above the project's (what each installation can do), a preflight listing what blocks the
 * upgrade and what to know, the upgrade with its progress (tables synchronized, lag), then confirm or
 * rollback while the old server is kept. Each step that changes the server asks first; a refusal (409)
 * or a failed job shows here. Forcing the minor restart with sessions open is for admins only. */
export function Upgrades({ path, version, admin }: { path: string; version: string; admin: boolean }) {
  const info = useLoad(() => get<Majors>(path + '/upgrade/major'), [path])
  // A step's job started before this page (another tab, a reload) shows too, while it runs.
  const running = useLoad(
    () => get<{ jobs: Job[] }>(path + '/jobs?limit=10').then((r) => r.jobs.find((j) => majorSteps[j.type] && !ended(j.state)) ?? null),
    [path],
  )
  const [started, setStarted] = useState<Started | null>(null)
  const [minorJob, setMinorJob] = useState<Started | null>(null)
  const [error, act] = useAction()
  const [choice, setChoice] = useState('')
  const [force, setForce] = useState(false)
  const d = info.data
  const target = choice || String(d?.majors[0]?.major ?? '')
  const chosen = d?.majors.find((m) => String(m.major) === target)
  const job = started ?? (running.data ? { id: running.data.id, label: majorSteps[running.data.type] } : null)
  const [busy, setBusy] = useState(false)
  /** step starts a major upgrade step's job after question (when given) is confirmed. */
  const step = (label: string, url: string, question = '') => {
    if (question && !confirm(question)) return Promise.resolve()
    return act(async () => {
      const r = await post<{ job: Job }>(url)
      setStarted({ id: r.job.id, label })
      setBusy(true)
    })
  }
  const major = (s: string) => path + '/upgrade/major' + s + '?target_major=' + encodeURIComponent(target)
  const onEnd = () => {
    setBusy(false)
    info.reload()
    running.reload()
  }
  const working = busy || (!!running.data && !started)
  return (
    <section class="card upgrades">
      <h2>Upgrades</h2>
      <ErrorBox error={info.error} />
      <dl class="facts">
        <dt>PostgreSQL</dt>
        <dd>
          {d?.postgres_version || version || '?'} {d && <span class="hint">(major {d.current_major})</span>}
        </dd>
      </dl>
      <h3>Minor upgrade</h3>
      <Form
        label="Minor upgrade"
        onSubmit={async () => {
          if (!confirm(`Restart ${force ? 'now, ending the open sessions' : 'the server'} on the installed minor release?`)) return
          const r = await post<{ job: Job }>(path + '/upgrade/minor' + (force ? '?force=true' : ''))
          setMinorJob({ id: r.job.id, label: 'Minor upgrade' })
        }}
      >
        <div class="row">
          {admin && (
            <label class="check">
              <input type="checkbox" checked={force} onChange={(e) => setForce((e.target as HTMLInputElement).checked)} /> even with sessions open
            </label>
          )}
          <button type="submit" class="primary">
            Restart on the installed minor
          </button>
        </div>
      </Form>
      {!admin && <p class="hint admin-only">Only an owner or an admin of the organization can restart the server while sessions are open.</p>}
      {minorJob && <JobProgress id={minorJob.id} label={minorJob.label} />}
      <h3>Major upgrade</h3>
      {d?.pending ? (
        <div class="notice upgrade-window" role="region" aria-label="Upgrade awaiting confirmation">
          <p>
            Upgraded from PostgreSQL {d.pending.previous_major} to {d.current_major} by {d.pending.method === 'logical' ? 'logical replication' : 'pg_upgrade'}. The old
            server is kept until you confirm.
          </p>
          <p class="hint">{rollbackText(d.pending)}</p>
          <div class="row">
            <button
              type="button"
              class="primary"
              disabled={working}
              onClick={() =>
                step(
                  'Confirm',
                  path + '/upgrade/major/confirm',
                  `Confirm the upgrade to PostgreSQL ${d.current_major}? The old server (PostgreSQL ${d.pending!.previous_major}) and its data are deleted: no rolling back after this.`,
                )
              }
            >
              Confirm upgrade
            </button>
            <button
              type="button"
              class="danger"
              disabled={working}
              onClick={() => step('Rollback', path + '/upgrade/major/rollback', `Roll back to PostgreSQL ${d.pending!.previous_major}? ${rollbackText(d.pending!)}`)}
            >
              Roll back to {d.pending.previous_major}
            </button>
          </div>
        </div>
      ) : (
        d && (
          <>
            {d.majors.length === 0 ? (
              <Empty>No newer PostgreSQL major is installed on this appliance: its operator can add one (appliance up --pg-dist 17=npm).</Empty>
            ) : (
              <Table cols={['Major', 'Upgrade by', { label: 'pg_upgrade', sm: true }, 'Client tools']}>
                {d.majors.map((m) => (
                  <tr key={m.major}>
                    <td>{m.major}</td>
                    <td>{m.method === 'logical' ? 'logical replication' : 'pg_upgrade'}</td>
                    <td class="sm-hide">{m.pg_upgrade ? 'yes' : 'no'}</td>
                    <td title={m.client_tools ? '' : 'backups, exports and previews fail after an upgrade to it until they are installed'}>
                      {m.client_tools ? 'yes' : 'no (server only)'}
                    </td>
                  </tr>
                ))}
              </Table>
            )}
            {chosen && (
              <Form label="Major upgrade" onSubmit={() => step('Preflight', major('/preflight'))}>
                <p class="hint">To {chosen.major} by {methodText[chosen.method]}. A preflight checks what would stop it, changing nothing.</p>
                {!chosen.client_tools && (
                  <p class="warning">PostgreSQL {chosen.major} has no client tools here: after the upgrade, backups and previews still work (as online copies), but exports and imports are refused until the client tools are installed.</p>
                )}
                <div class="row">
                  <div>
                    <label for="major-target">Target major</label>
                    <select id="major-target" value={target} onChange={(e) => setChoice((e.target as HTMLSelectElement).value)}>
                      {d.majors.map((m) => (
                        <option value={String(m.major)}>{m.major}</option>
                      ))}
                    </select>
                  </div>
                  <button type="submit" disabled={working}>
                    Preflight
                  </button>
                  <button
                    type="button"
                    class="primary"
                    disabled={working}
                    onClick={() =>
                      step(
                        'Major upgrade',
                        major(''),
                        `Upgrade to PostgreSQL ${chosen.major} by ${methodText[chosen.method]}? The old server is kept until you confirm or roll back.`,
                      )
                    }
                  >
                    Upgrade to {chosen.major}
                  </button>
                </div>
              </Form>
            )}
          </>
        )
      )}
      <ErrorBox error={error} />
      {job && <StepProgress key={job.id} id={job.id} label={job.label} onEnd={onEnd} />}
    </section>
  )
}

/** StepProgress follows a major upgrade step's job, polling it each second while it runs: its step, the
 * tables synchronized and the lag (what the job records as it goes), then its outcome: a preflight's
 * blockers or warnings, an upgrade's write pause and times, a failure's error. */
function StepProgress({ id, label, onEnd }: { id: string; label: string; onEnd: () => void }) {
  const [done, setDone] = useState(false)
  const { data, error } = useLoad(
    () =>
      get<{ job: Job }>('/v1/jobs/' + seg(id)).then((r) => {
        if (ended(r.job.state) && !done) {
          setDone(true)
          onEnd()
        }
        return r
      }),
    [id, done],
    done ? 0 : 1000,
  )
  const j = data?.job
  const r = (j?.result ?? {}) as Record<string, unknown>
  const num = (k: string) => (typeof r[k] === 'number' ? (r[k] as number) : undefined)
  const list = (k: string) => (Array.isArray(r[k]) ? (r[k] as unknown[]).map(String) : [])
  return (
    <div class="job-progress upgrade-progress" role="status" aria-live="polite">
      <span>{label}: </span>
      {j ? <Badge value={j.state} /> : '…'}
      {j && !ended(j.state) && <span class="hint"> (job {j.id}, started {j.started_at ? when(j.started_at) : 'soon'})</span>}
      <ErrorBox error={error} />
      {j && !ended(j.state) && typeof r.step === 'string' && (
        <dl class="facts job-result">
          <dt>Step</dt>
          <dd>{r.step}</dd>
          {num('tables') !== undefined && [
            <dt>Tables synchronized</dt>,
            <dd>
              {num('tables_synchronized')} of {num('tables')}{' '}
              <progress max={num('tables') || 1} value={num('tables_synchronized')} aria-label="Tables synchronized" />
            </dd>,
          ]}
          {num('lag_bytes') !== undefined && [<dt>Lag</dt>, <dd>{bytes(num('lag_bytes')!)}</dd>]}
        </dl>
      )}
      {j?.state === 'completed' && <Outcome job={j} result={r} list={list} />}
      {j?.state === 'failed' && <Failure job={j} />}
    </div>
  )
}

/** Outcome is what a completed step reports. */
function Outcome({ job, result, list }: { job: Job; result: Record<string, unknown>; list: (k: string) => string[] }) {
  if (typeof result.skipped === 'string') return <p class="hint">{result.skipped}</p>
  const fields: Record<string, string[]> = {
    'project.upgrade_major_preflight': ['from_major', 'target_major', 'method', 'tables'],
    'project.upgrade_major': ['from_major', 'to_major', 'postgres_version', 'method', 'tables_synchronized', 'sequences_advanced', 'write_pause_ms', 'copy_ms', 'total_ms'],
    'project.upgrade_major_confirm': ['removed'],
    'project.upgrade_major_rollback': ['rolled_back_to', 'postgres_version'],
  }
  const names: Record<string, string> = {
    from_major: 'From',
    target_major: 'To',
    to_major: 'To',
    postgres_version: 'Now running',
    method: 'Method',
    tables: 'Tables',
    tables_synchronized: 'Tables synchronized',
    sequences_advanced: 'Sequences advanced',
    write_pause_ms: 'Write pause',
    copy_ms: 'Copy and catch-up',
    total_ms: 'Total',
    removed: 'Removed',
    rolled_back_to: 'Back on major',
  }
  const shown = (fields[job.type] ?? []).filter((k) => result[k] !== undefined && result[k] !== null && result[k] !== '')
  const warnings = [...list('warnings'), ...list('cutover_warnings')]
  return (
    <>
      {job.type === 'project.upgrade_major_preflight' && <p class="ok-banner">No blockers: the upgrade can run.</p>}
      {job.type === 'project.upgrade_major_confirm' && <p class="ok-banner">Confirmed: the old server is gone.</p>}
      {shown.length > 0 && (
        <dl class="facts job-result">
          {shown.map((k) => [<dt>{names[k]}</dt>, <dd>{k === 'removed' ? 'the old server’s data' : readable(k, result[k])}</dd>])}
        </dl>
      )}
      {warnings.length > 0 && (
        <div class="upgrade-warnings">
          <h4>To know</h4>
          <ul>
            {warnings.map((w) => (
              <li class="warning">{w}</li>
            ))}
          </ul>
        </div>
      )}
    </>
  )
}

/** Failure shows a failed step: the blockers a preflight (or the upgrade's own check) found, one a line,
 * or the error and the program's output. */
function Failure({ job }: { job: Job }) {
  const m = /cannot run: (.*)$/s.exec(job.error)
  if (m) {
    return (
      <div class="error upgrade-blockers" role="alert">
        <strong>Blockers</strong>
        <ul>
          {m[1].split('; ').map((b) => (
            <li>{b}</li>
          ))}
        </ul>
      </div>
    )
  }
  return (
    <div class="error" role="alert">
      {job.error}
      {job.last_stderr && <pre>{job.last_stderr}</pre>}
    </div>
  )
}
