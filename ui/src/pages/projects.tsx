import { useState } from 'preact/hooks'
import { get, post, type Me, type Project } from '../api'
import { useOrganizationEvents } from '../events'
import { navigate } from '../router'
import { AdminOnly, Badge, Empty, ErrorBox, Form, Table, plural, useLoad, when } from '../ui'
import { usePlanNames } from './operator_plans'

const sorts: Record<string, { label: string; cmp: (a: Project, b: Project) => number }> = {
  name: { label: 'Name', cmp: (a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id) },
  created: { label: 'Newest first', cmp: (a, b) => b.created_at.localeCompare(a.created_at) || a.id.localeCompare(b.id) },
  state: { label: 'State', cmp: (a, b) => a.state.localeCompare(b.state) || a.runtime_status.localeCompare(b.runtime_status) || a.name.localeCompare(b.name) },
}

/** useListQuery is the list's search text and sort, kept in the page's URL (?q=…&sort=…) so a reload or a
 * shared link shows the same list. */
function useListQuery(): [string, string, (q: string, sort: string) => void] {
  const params = new URLSearchParams(location.search)
  const [q, setQ] = useState(params.get('q') ?? '')
  const [sort, setSort] = useState(sorts[params.get('sort') ?? ''] ? params.get('sort')! : 'name')
  return [
    q,
    sort,
    (q, sort) => {
      setQ(q)
      setSort(sort)
      const next = new URLSearchParams()
      if (q) next.set('q', q)
      if (sort !== 'name') next.set('sort', sort)
      const search = next.toString()
      history.replaceState(null, '', location.pathname + (search ? '?' + search : ''))
    },
  ]
}

/** Projects lists the organization's projects; their states arrive live from the organization's event
 * stream (any project event reloads the list), polling only as a slow fallback. */
export function Projects({ me }: { me: Me }) {
  const { data, error, reload } = useLoad(() => get<{ projects: Project[]; open_alerts: Record<string, number> }>('/v1/projects'), [], 30000)
  const [q, sort, setQuery] = useListQuery()
  const needle = q.trim().toLowerCase()
  const shown = (data?.projects ?? []).filter((p) => !needle || p.name.toLowerCase().includes(needle) || p.id.toLowerCase().includes(needle)).sort(sorts[sort].cmp)
  useOrganizationEvents(me.organization?.id ?? '', () => reload())
  const [name, setName] = useState('')
  // '' sends no environment: the API's default (production) applies, the one default of UI and API.
  const [environment, setEnvironment] = useState('')
  const [plan, setPlan] = useState('free')
  const planNames = usePlanNames(plan)
  return (
    <main>
      <h1>Projects</h1>
      <section class="card">
        <h2>New project</h2>
        <AdminOnly me={me} what="create projects">
          <p class="hint">A production project is backed up daily from the start (once between 03:00 and 03:59 UTC; change or turn it off on its Backups tab).</p>
        <Form
          label="Create a project"
          onSubmit={async () => {
            const res = await post<{ project: Project }>('/v1/projects', environment ? { name, environment, plan } : { name, plan })
            navigate('/projects/' + res.project.id)
          }}
        >
          <div class="row">
            <div>
              <label for="project-name">Name</label>
              <input id="project-name" required maxLength={63} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="project-env">Environment</label>
              <select id="project-env" value={environment} onChange={(e) => setEnvironment((e.target as HTMLSelectElement).value)}>
                <option value="">production (default)</option>
                <option value="staging">staging</option>
                <option value="development">development</option>
              </select>
            </div>
            <div>
              <label for="project-plan">Plan</label>
              <select id="project-plan" value={plan} onChange={(e) => setPlan((e.target as HTMLSelectElement).value)}>
                {planNames.map((v) => (
                  <option value={v}>{v}</option>
                ))}
              </select>
            </div>
            <button type="submit" class="primary">
              Create project
            </button>
          </div>
        </Form>
        </AdminOnly>
      </section>
      <ErrorBox error={error} />
      {data && data.projects.length === 0 && <Empty>No projects yet: name one above and create it; it is ready in about a second.</Empty>}
      {data && data.projects.length > 0 && (
        <div class="row list-query" role="search" aria-label="Projects">
          <div>
            <label for="project-search">Search</label>
            <input id="project-search" type="search" placeholder="Name or ID" value={q} onInput={(e) => setQuery((e.target as HTMLInputElement).value, sort)} />
          </div>
          <div>
            <label for="project-sort">Sort by</label>
            <select id="project-sort" value={sort} onChange={(e) => setQuery(q, (e.target as HTMLSelectElement).value)}>
              {Object.entries(sorts).map(([k, v]) => (
                <option value={k}>{v.label}</option>
              ))}
            </select>
          </div>
          <p class="hint" role="status">
            {shown.length === data.projects.length ? plural(shown.length, 'project') : `${shown.length} of ${plural(data.projects.length, 'project')}`}
          </p>
        </div>
      )}
      {data && data.projects.length > 0 && shown.length === 0 && <Empty>No project's name or ID contains “{q.trim()}”.</Empty>}
      {shown.length > 0 && (
        <Table cols={['Name', 'State', 'Runtime', { label: 'Environment', sm: true }, { label: 'Plan', sm: true }, { label: 'Created', sm: true }]}>
            {shown.map((p) => (
              <tr key={p.id}>
                <td>
                  <a href={'/projects/' + p.id}>{p.name}</a>
                  {(data?.open_alerts[p.id] ?? 0) > 0 && (
                    <>
                      {' '}
                      <a class="badge badge-alerts" href={'/projects/' + p.id + '/monitoring'}>
                        {plural(data!.open_alerts[p.id], 'alert')}
                      </a>
                    </>
                  )}
                </td>
                <td>
                  <Badge value={p.state} />
                </td>
                <td>
                  <Badge value={p.runtime_status} />
                </td>
                <td class="sm-hide">{p.environment}</td>
                <td class="sm-hide">{p.plan}</td>
                <td class="sm-hide">{when(p.created_at)}</td>
              </tr>
            ))}
        </Table>
      )}
    </main>
  )
}
