// Ordinary code against the client: it must type-check (the test runs tsc on it). A document looser than
// the server (every object nullable, open strings for closed sets) makes these lines fail.
import { client } from './index'

export async function example(baseUrl: string, key: string): Promise<string> {
  const api = client(baseUrl, key)
  const created = await api.POST('/v1/projects', { body: { name: 'shop', environment: 'development' } })
  if (created.error) return created.error.error
  const jobID: string = created.data.job.id
  const projectID: string = created.data.project.id
  const plan: 'free' | 'pro' | 'scale' = created.data.project.plan // closed sets are enums

  const job = await api.GET('/v1/jobs/{jobID}', { params: { path: { jobID } } })
  if (job.data) {
    const state: string = job.data.job.state
    console.log(state)
  }
  const conns = await api.GET('/v1/projects/{projectID}/connections', { params: { path: { projectID } } })
  const url: string | undefined = conns.data?.connections.direct_url
  const me = await api.GET('/v1/me')
  const orgName: string | undefined = me.data?.organization?.name // null for a platform admin
  const keys = await api.GET('/v1/organizations/{orgID}/api-keys', { params: { path: { orgID: me.data?.principal.organization_id ?? '' } } })
  const first: string | undefined = keys.data?.api_keys[0]?.name
  return [url, orgName, first, plan].join(' ')
}
