// global-setup.ts: one throwaway appliance for a test run (vitest's globalSetup shape: returns its teardown)
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { Agent, setGlobalDispatcher } from 'undici'
import { client } from '@appliance/client'

export default async function setup() {
  const up = spawn('appliance', ['up', '--ephemeral', '--exit-with-parent'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = once(up, 'exit')
  const first = await createInterface({ input: up.stdout })[Symbol.asyncIterator]().next()
  if (first.done) throw new Error(`appliance up ended before it served: ${await exited}`)
  const creds = JSON.parse(first.value) // api_url, ca_cert, api_key, owner_email, owner_password, kv_resp, kv_rest, pid
  setGlobalDispatcher(new Agent({ connect: { ca: creds.ca_cert } })) // fetch trusts the appliance's CA
  const api = client(creds.api_url, creds.api_key)
  const created = await api.POST('/v1/projects', { body: { name: 'shop', environment: 'development' } })
  if (created.error) throw new Error(created.error.error)
  for (let job = created.data.job; job.state !== 'completed'; ) {
    if (job.state === 'failed') throw new Error(`the project's provisioning failed: ${job.error}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
    const polled = await api.GET('/v1/jobs/{jobID}', { params: { path: { jobID: job.id } } })
    if (polled.error) throw new Error(polled.error.error)
    job = polled.data.job
  }
  const projectID = created.data.project.id
  const conns = await api.GET('/v1/projects/{projectID}/connections', { params: { path: { projectID } } })
  if (conns.error) throw new Error(conns.error.error)
  process.env.DATABASE_URL = conns.data.connections.direct_url // verify-full against the CA's file (sslrootcert)
  return async () => {
    up.kill('SIGTERM')
    await exited // every process and file of it is gone
  }
}
