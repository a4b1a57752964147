// The dashboard is a client of the public API like the CLI: every call goes to /v1/... with the session
// cookie (HttpOnly: this code never sees the token) and the CSRF header the API requires with it.

export class ApiError extends Error {
  /** body is the error answer's JSON (a SQL error's sqlstate, position, detail and hint are there). */
  constructor(public status: number, message: string, public body: Record<string, unknown> = {}) {
    super(message)
  }
}

type Listener = () => void
const unauthenticated = new Set<Listener>()

/** onUnauthenticated registers what to do when a call answers 401 (the session ended). */
export function onUnauthenticated(f: Listener): () => void {
  unauthenticated.add(f)
  return () => unauthenticated.delete(f)
}

const connection = new Set<(lost: boolean) => void>()
let lost = false

/** onConnection registers what to do when the appliance stops answering (true) and answers again (false):
 * the app shows one banner for it, not an error per card. */
export function onConnection(f: (lost: boolean) => void): () => void {
  connection.add(f)
  return () => connection.delete(f)
}

function setLost(v: boolean) {
  if (lost === v) return
  lost = v
  connection.forEach((f) => f(v))
}

/** isConnectionError: the call got no answer at all (the banner says so; a card keeps what it shows). */
export function isConnectionError(e: unknown): boolean {
  return e instanceof ApiError && e.status === 0
}

export async function api<T>(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<T> {
  const headers: Record<string, string> = { 'X-Appliance-CSRF': '1', Accept: 'application/json', ...extra }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  let res: Response
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      redirect: 'error',
    })
  } catch (e) {
    setLost(true)
    throw new ApiError(0, 'the appliance does not answer: ' + String(e))
  }
  setLost(false)
  const text = await res.text()
  let data: any = undefined
  if (text) {
    try {
      data = JSON.parse(text)
    } catch {
      throw new ApiError(res.status, `${method} ${path}: unexpected answer (${res.status})`)
    }
  }
  if (!res.ok) {
    if (res.status === 401 && path !== '/v1/auth/sessions') unauthenticated.forEach((f) => f())
    throw new ApiError(res.status, (data && data.error) || `${method} ${path}: ${res.status}`, data && typeof data === 'object' ? data : {})
  }
  return data as T
}

/** An early call: sent by prefetch before any component asks for it. */
type Early = { promise: Promise<unknown>; ok?: boolean; value?: unknown; at: number; wait: boolean }
const early = new Map<string, Early>()

/** earlyFor is how long an early call's answer may stand in for a new one, once it has come. */
const earlyFor = 10000

/** prefetch sends GET path now, for the first get(path) to take instead of calling again: the calls the
 * first page needs go out together as the script starts (boot.ts), not one after the other as the
 * components that need them mount. wait: the first page waits for its answer (earlyAnswers) and shows
 * it at once (taken), rather than rendering without it and again when it comes. */
export function prefetch(path: string, wait = false) {
  if (early.has(path)) return
  const e: Early = { promise: api('GET', path), at: 0, wait }
  e.promise.then(
    (v) => ((e.ok = true), (e.value = v), (e.at = Date.now())),
    () => (e.ok = false),
  )
  early.set(path, e)
}

/** earlyAnswers resolves once every early call sent with wait has answered, well or not. */
export function earlyAnswers(): Promise<unknown> {
  return Promise.all([...early.values()].filter((e) => e.wait).map((e) => e.promise.catch(() => undefined)))
}

const fresh = (e: Early) => e.ok === true && Date.now() - e.at < earlyFor

/** get is GET path; it takes an early call's answer once (one still in flight, or one that succeeded in
 * the last seconds): a failed early call is made again, and every later get calls the API. */
export function get<T>(path: string): Promise<T> {
  const e = early.get(path)
  if (e) {
    early.delete(path)
    if (e.ok === undefined || fresh(e)) return e.promise as Promise<T>
  }
  return api<T>('GET', path)
}

/** taken is the answer of an early call to path if it has come and succeeded (using it up, as get does),
 * for a component's first render; undefined otherwise. */
export function taken<T>(path: string): T | undefined {
  const e = early.get(path)
  if (!e || !fresh(e)) return undefined
  early.delete(path)
  return e.value as T
}

export const post = <T,>(path: string, body?: unknown) => api<T>('POST', path, body ?? {})
export const patch = <T,>(path: string, body: unknown) => api<T>('PATCH', path, body)
export const put = <T,>(path: string, body: unknown) => api<T>('PUT', path, body)
export const del = <T,>(path: string, body?: unknown) => api<T>('DELETE', path, body)

export const seg = encodeURIComponent

// The shapes the pages read: the API's own schemas, generated from /v1/openapi.json into the TypeScript
// client (clients/typescript), so the dashboard cannot drift from the API.
import type { components } from '../../clients/typescript/src/schema'

export type Schemas = components['schemas']
export type Principal = Schemas['Principal']
export type Organization = Schemas['Organization']
export type Me = Schemas['MeResponse']
export type Project = Schemas['Project']
export type Job = Schemas['Job']
export type Connections = Schemas['Connections']
