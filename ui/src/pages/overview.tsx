import { get, seg, type Me, type Schemas } from '../api'
import { Empty, ErrorBox, Table, lazy, useLoad } from '../ui'
import { BillingStatus } from './orgbilling'

// The audit log is in the project tabs' chunk, fetched when shown.
const AuditTab = lazy(() => import('./project_tabs').then((m) => m.AuditTab))
const Referrals = lazy(() => import('./referrals').then((m) => m.Referrals))
const SignupInvites = lazy(() => import('./signupinvites').then((m) => m.SignupInvites))

type Usage = Schemas['Usage']

export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i]
}

/** Meter is a bar of a value against its limit; percent, when given, is shown (the API's figure). */
export function Meter({ label, value, limit, show, percent }: { label: string; value: number; limit: number; show: (n: number) => string; percent?: number }) {
  const pct = limit > 0 ? Math.min(100, (100 * value) / limit) : 0
  return (
    <div class="meter">
      <div class="meter-label">
        <span>{label}</span>
        <span>
          {show(value)} of {show(limit)}
          {percent !== undefined && ` (${percent < 10 ? percent.toFixed(1) : percent.toFixed(0)}%)`}
        </span>
      </div>
      <div class="meter-bar" role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={limit} aria-valuenow={value}>
        <div style={{ width: pct + '%' }} class={pct > 90 ? 'meter-fill high' : pct >= 80 ? 'meter-fill warn' : 'meter-fill'} />
      </div>
    </div>
  )
}

/** Chart draws the storage history as an SVG line (no third-party library, no inline script). */
function Chart({ points }: { points: { sampled_at: string; storage_bytes: number }[] }) {
  if (points.length < 2) return <Empty>The storage history fills in as the hourly samples come (the first after an hour).</Empty>
  const w = 600
  const h = 160
  const max = Math.max(...points.map((p) => p.storage_bytes), 1)
  const t0 = Date.parse(points[0].sampled_at)
  const t1 = Date.parse(points[points.length - 1].sampled_at)
  const x = (t: string) => ((Date.parse(t) - t0) / Math.max(1, t1 - t0)) * (w - 20) + 10
  const y = (b: number) => h - 10 - (b / max) * (h - 30)
  const d = points.map((p, i) => (i ? 'L' : 'M') + x(p.sampled_at).toFixed(1) + ' ' + y(p.storage_bytes).toFixed(1)).join(' ')
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${w} ${h}`} role="img" aria-label={`Storage over time, up to ${bytes(max)}`}>
        <path d={d} class="chart-line" fill="none" />
      </svg>
      <figcaption>
        Storage, {new Date(t0).toLocaleDateString()} – {new Date(t1).toLocaleDateString()}; peak {bytes(max)}
      </figcaption>
    </figure>
  )
}

/** hoursOf shows seconds of compute as hours (one decimal under 100 h). */
function hoursOf(s: number): string {
  const h = s / 3600
  return (h < 100 ? h.toFixed(1) : Math.round(h).toLocaleString()) + ' h'
}

export function Overview({ me }: { me: Me }) {
  const org = me.organization!
  const { data, error } = useLoad(() => get<{ usage: Usage }>('/v1/organizations/' + seg(org.id) + '/usage'), [org.id], 15000)
  const u = data?.usage
  return (
    <main>
      <h1>{org.name}</h1>
      <ErrorBox error={error} />
      {u && (
        <>
          <section class="card">
            <h2>Quotas</h2>
            <Meter label="Projects" value={u.totals.projects} limit={u.totals.projects_limit} show={String} />
            <Meter label="Storage" value={u.totals.storage_bytes} limit={u.totals.storage_limit_bytes} show={bytes} />
            <Meter label="Previews" value={u.totals.previews} limit={u.totals.previews_limit} show={String} />
            <dl class="facts">
              <dt>Connections now</dt>
              <dd>{u.totals.connections}</dd>
              <dt>Backup store</dt>
              <dd>{bytes(u.totals.backups_storage_bytes)}</dd>
              <dt>Jobs succeeded (7 days)</dt>
              <dd>{Math.round(u.totals.job_success_rate_7d * 100)}%</dd>
              <dt>Compute this month</dt>
              <dd title="Time the projects' servers ran this month (UTC); suspended projects (scale to zero) run none">
                {hoursOf(u.totals.compute_seconds)}
                {u.totals.suspended_seconds > 0 && <> ({hoursOf(u.totals.suspended_seconds)} suspended)</>}
              </dd>
            </dl>
          </section>
          <section class="card">
            <h2>Storage history</h2>
            <Chart points={u.storage_history} />
          </section>
          <section class="card">
            <h2>Projects</h2>
            {u.projects.length === 0 ? (
              <Empty>
                No projects yet: <a href="/projects">create one</a>.
              </Empty>
            ) : (
              <Table cols={['Project', 'State', 'Storage', { label: 'Connections', sm: true }]}>
                  {u.projects.map((p) => (
                    <tr key={p.project_id}>
                      <td>
                        <a href={'/projects/' + p.project_id}>{p.name}</a>
                      </td>
                      <td>{p.state}</td>
                      <td>{bytes(p.storage_bytes)}</td>
                      <td class="sm-hide">{p.connections}</td>
                    </tr>
                  ))}
              </Table>
            )}
          </section>
        </>
      )}
      <BillingStatus orgID={org.id} />
      <Referrals me={me} />
      {me.principal.idp_organization_role === 'owner' && <SignupInvites path={'/v1/organizations/' + seg(org.id) + '/signup-invites'} owner />}
      <AuditTab path={'/v1/organizations/' + seg(org.id)} orgID={org.id} />
    </main>
  )
}
