import { useState } from 'preact/hooks'
import { get, post, type Me, type Project } from '../api'
import { useOrganizationEvents } from '../events'
import { navigate } from '../router'
import { AdminOnly, Badge, Empty, ErrorBox, Form, Table, useLoad, when } from '../ui'

/** Projects lists the organization's projects; their states arrive live from the organization's event
 * stream (any project event reloads the list), polling only as a slow fallback. */
export function Projects({ me }: { me: Me }) {
  const { data, error, reload } = useLoad(() => get<{ projects: Project[] }>('/v1/projects'), [], 30000)
  useOrganizationEvents(me.organization?.id ?? '', () => reload())
  const [name, setName] = useState('')
  // '' sends no environment: the API's default (production) applies, the one default of UI and API.
  const [environment, setEnvironment] = useState('')
  const [plan, setPlan] = useState('free')
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
                <option value="free">free</option>
                <option value="pro">pro</option>
                <option value="scale">scale</option>
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
        <Table cols={['Name', 'State', 'Runtime', { label: 'Environment', sm: true }, { label: 'Plan', sm: true }, { label: 'Created', sm: true }]}>
            {data.projects.map((p) => (
              <tr key={p.id}>
                <td>
                  <a href={'/projects/' + p.id}>{p.name}</a>
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
