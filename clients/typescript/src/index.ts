// The appliance's API client: openapi-fetch typed by schema.d.ts, which openapi-typescript generates from
// the appliance's /v1/openapi.json (npm run generate; a Go test fails when it is stale).
import createClient from 'openapi-fetch'
import type { paths, components } from './schema'

export type { paths, components }
export type Schemas = components['schemas']

/** client talks to an appliance at baseUrl (e.g. https://127.0.0.1:7443) with an API key. */
export function client(baseUrl: string, apiKey: string) {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } })
}
export * from './enums'
