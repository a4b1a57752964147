import { get, seg, type Connections, type Job, type Project as P } from '../api'
import { Badge, CopyField, ErrorBox, useLoad, when } from '../ui'

export function Project({ id }: { id: string }) {
  const path = '/v1/projects/' + seg(id)
  const prj = useLoad(() => get<{ project: P }>(path), [id], 2000)
  const p = prj.data?.project
  const active = p?.state === 'active'
  const conns = useLoad(() => (active ? get<{ connections: Connections }>(path + '/connections') : Promise.resolve(undefined)), [id, active])
  const jobs = useLoad(() => get<{ jobs: Job[] }>(path + '/jobs?limit=10'), [id], 2000)
  return (
    <main>
      <p class="crumbs">
        <a href="/projects">Projects</a> /
      </p>
      <ErrorBox error={prj.error} />
      {p && (
        <>
          <h1>{p.name}</h1>
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
          <section class="card">
            <h2>Connect</h2>
            {!active && <p>Connection strings appear once the project is active.</p>}
            <ErrorBox error={conns.error} />
            {conns.data && (
              <>
                <CopyField label="Direct connection" value={conns.data.connections.direct_url} secret />
                <CopyField label="Pooled connection (PgBouncer, transaction mode)" value={conns.data.connections.pooled_url} secret />
              </>
            )}
          </section>
        </>
      )}
      <section class="card">
        <h2>Jobs</h2>
        <ErrorBox error={jobs.error} />
        {jobs.data && (
          <table>
            <thead>
              <tr>
                <th scope="col">Type</th>
                <th scope="col">State</th>
                <th scope="col" class="sm-hide">
                  Started
                </th>
                <th scope="col">Error</th>
              </tr>
            </thead>
            <tbody>
              {jobs.data.jobs.map((j) => (
                <tr key={j.id}>
                  <td>{j.type}</td>
                  <td>
                    <Badge value={j.state} />
                  </td>
                  <td class="sm-hide">{when(j.created_at)}</td>
                  <td class="job-error">
                    {j.error}
                    {j.last_stderr && <pre>{j.last_stderr}</pre>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
    </main>
  )
}
