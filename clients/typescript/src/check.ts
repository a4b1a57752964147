// Ordinary code against the client: it must type-check with tsc --strict (the test runs it), with no casts
// and no non-null assertions. A document looser than the server (every object nullable, open strings for
// closed sets) makes these lines fail.
import { client } from './index'
import type { Schemas } from './index'

// 64-bit integers that can pass 2^53 are strings: as a JSON number, 8071840665353803258 would read as
// 8071840665353803000. These lines fail to compile if query_id is typed a number again.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false
export const statementQueryID: Equal<Schemas['Statement']['query_id'], string> = true
export const suggestionQueryID: Equal<Schemas['Suggestion']['query_id'], string> = true
export function slowQueryIDs(o: Schemas['ObservabilitySnapshot']): string[] {
  return o.slow_queries.map((q) => q.query_id)
}

export async function example(baseUrl: string, key: string, dump: string): Promise<string> {
  const api = client(baseUrl, key)

  // List the projects.
  const list = await api.GET('/v1/projects')
  const names: string[] = list.data ? list.data.projects.map((p) => p.name) : []

  // Create one and read its job.
  const created = await api.POST('/v1/projects', { body: { name: 'shop', environment: 'development' } })
  if (created.error) return created.error.error
  const jobID: string = created.data.job.id
  const projectID: string = created.data.project.id
  const environment: 'production' | 'staging' | 'development' = created.data.project.environment // closed sets are enums
  const plan: string = created.data.project.plan // the operators' configuration: GET /v1/plans
  const job = await api.GET('/v1/jobs/{jobID}', { params: { path: { jobID } } })
  const state: string = job.data ? job.data.job.state : 'unknown'

  // Upload a dump through the signed URL the API hands out, then import it.
  const upload = await api.POST('/v1/projects/{projectID}/imports/uploads', { params: { path: { projectID } } })
  if (upload.error) return upload.error.error
  const signed = new URL(upload.data.upload.upload_url) // always returned
  const put = await api.PUT('/v1/uploads/imports/{uploadID}', {
    params: {
      path: { uploadID: upload.data.upload.id },
      query: { expires: Number(signed.searchParams.get('expires')), sig: signed.searchParams.get('sig') ?? '' },
    },
    body: dump,
    headers: { 'Content-Type': 'application/octet-stream' },
    bodySerializer: (b) => b,
  })
  if (put.error) return put.error.error
  const imported = await api.POST('/v1/projects/{projectID}/imports', {
    params: { path: { projectID } },
    body: { confirm: true, upload_id: upload.data.upload.id },
  })
  const importJob: string = imported.data ? imported.data.job.id : ''

  const conns = await api.GET('/v1/projects/{projectID}/connections', { params: { path: { projectID } } })
  const url: string | undefined = conns.data?.connections.direct_url
  const me = await api.GET('/v1/me')
  const orgName: string | undefined = me.data?.organization?.name // null for a platform admin
  return [names.join(','), jobID, plan, environment, state, importJob, url, orgName].join(' ')
}
