import { post, seg, type Job, type Me, type Project, type Schemas } from '../api'
import { JobProgress } from '../job'
import { AdminOnly, Badge, ErrorBox, plural, useAction, when } from '../ui'
import { Meter, bytes } from './overview'
import { useState } from 'preact/hooks'

export type Summary = Schemas['ProjectSummary']

/** cores shows a CPU figure: "0.02 cores". */
const cores = (n: number) => (n < 0.1 ? n.toFixed(3) : n.toFixed(2)) + (n === 1 ? ' core' : ' cores')

/** Sparkline is a small SVG line of values against max (the plan's size), with the newest value. */
function Sparkline({ label, values, max, show }: { label: string; values: number[]; max: number; show: (n: number) => string }) {
  const w = 240
  const h = 44
  const last = values.length ? values[values.length - 1] : 0
  const peak = Math.max(0, ...values)
  const top = Math.max(max, peak, 1e-9)
  const d = values.map((v, i) => (i ? 'L' : 'M') + ((i * w) / Math.max(1, values.length - 1)).toFixed(1) + ' ' + (h - 2 - (v / top) * (h - 4)).toFixed(1)).join(' ')
  return (
    <figure class="spark">
      <figcaption>
        <span>{label}</span>
        <span>
          {show(last)}
          {max > 0 && ' of ' + show(max)}
        </span>
      </figcaption>
      {values.length < 2 ? (
        <p class="hint">The line fills in as the minutely samples come.</p>
      ) : (
        <svg viewBox={`0 0 ${w} ${h}`} preserveAspectRatio="none" role="img" aria-label={`${label} over the last 24 hours: now ${show(last)}, peak ${show(peak)}`}>
          <path d={d} class="spark-line" fill="none" vector-effect="non-scaling-stroke" />
        </svg>
      )}
    </figure>
  )
}

/** Home is the project's first tab above its connection details: storage, connections, CPU and memory
 * as the sampler last read them, the newest backup, the alerts in force, and the restart. */
export function Home({ p, summary, error, me, active }: { p: Project; summary?: Summary; error: string; me: Me; active: boolean }) {
  const base = '/projects/' + p.id
  const s = summary
  return (
    <section class="card" aria-labelledby="home-heading">
      <h2 id="home-heading">At a glance</h2>
      <ErrorBox error={error} />
      {s && (
        <>
          <div class="home-grid">
            <div class="tile">
              <Meter label="Storage" value={s.storage_bytes} limit={s.storage_limit_bytes} show={bytes} />
              <Meter label="Connections" value={s.connections} limit={s.connection_limit} show={String} />
              <p class="hint">{s.sampled_at ? `As sampled ${when(s.sampled_at)} (every minute).` : 'Not sampled yet: the appliance reads the server every minute.'}</p>
            </div>
            <div class="tile" role="group" aria-label="CPU and memory">
              <Sparkline label="CPU" values={s.usage.map((u) => u.cpu_cores_used)} max={s.cpu_quota_cores} show={cores} />
              <Sparkline label="Memory" values={s.usage.map((u) => u.mem_usage_bytes)} max={s.mem_limit_bytes} show={bytes} />
              <a href={base + '/monitoring'}>Monitoring</a>
            </div>
            <div class="tile" role="group" aria-label="Last backup">
              <h3>Last backup</h3>
              {s.last_backup ? (
                <p>
                  <Badge value={s.last_backup.state} /> {when(s.last_backup.created_at)}
                  {s.last_backup.size_bytes > 0 && <>, {bytes(s.last_backup.size_bytes)}</>}
                  {s.last_backup.verification_state === 'failed' && (
                    <>
                      {' '}
                      <Badge value="failed" label="verification failed" />
                    </>
                  )}
                </p>
              ) : (
                <p class="hint">No backup yet.</p>
              )}
              <a href={base + '/backups'}>Backups</a>
            </div>
            <div class="tile" role="group" aria-label="Open alerts">
              <h3>Alerts</h3>
              {s.open_alerts.length === 0 ? (
                <p class="hint">None in force.</p>
              ) : (
                <ul class="home-alerts">
                  {s.open_alerts.slice(0, 3).map((a) => (
                    <li key={a.id}>
                      <Badge value={a.severity} /> {a.message}
                    </li>
                  ))}
                </ul>
              )}
              <a href={base + '/monitoring'}>{s.open_alerts.length ? `See ${plural(s.open_alerts.length, 'alert')} in force` : 'Alerts history'}</a>
            </div>
          </div>
          <Restart p={p} me={me} active={active} />
        </>
      )}
    </section>
  )
}

/** Restart restarts the server and its pooler after a confirmation: for admins, as forcing a minor
 * upgrade is (it ends the sessions open). */
function Restart({ p, me, active }: { p: Project; me: Me; active: boolean }) {
  const [job, setJob] = useState<string>('')
  const [error, act] = useAction()
  return (
    <div class="compute">
      <h3>Compute</h3>
      <AdminOnly me={me} what="restart the server">
        <div class="row">
          <button
            type="button"
            disabled={!active}
            onClick={() => {
              if (!confirm(`Restart the server of ${p.name}? Its open sessions end; it is back in a few seconds.`)) return
              act(async () => setJob((await post<{ job: Job }>('/v1/projects/' + seg(p.id) + '/restart')).job.id))
            }}
          >
            Restart the server
          </button>
          <span class="hint">Stops and starts PostgreSQL and its pooler; the data stays.</span>
        </div>
      </AdminOnly>
      <ErrorBox error={error} />
      {job && <JobProgress id={job} label="Restart" />}
    </div>
  )
}
