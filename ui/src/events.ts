import { useEffect, useRef } from 'preact/hooks'
import { useLoad } from './ui'

// useProjectEvents follows a project's event stream (GET /v1/projects/{id}/events); '' follows nothing.
export function useProjectEvents(projectID: string, onEvent: Listener) {
  useEvents(projectID ? '/v1/projects/' + encodeURIComponent(projectID) + '/events' : '', onEvent)
}

// useOrganizationEvents follows the stream of every project of an organization (GET
// /v1/organizations/{id}/events); '' follows nothing.
export function useOrganizationEvents(orgID: string, onEvent: Listener) {
  useEvents(orgID ? '/v1/organizations/' + encodeURIComponent(orgID) + '/events' : '', onEvent)
}

type Listener = (type: string, data: unknown) => void

// streams are the open event streams, one per path, shared by every component following it.
const streams = new Map<string, { listeners: Set<Listener>; stop: AbortController }>()

// useEvents follows an event stream (with follow, below) and calls onEvent for each event; the components
// following one path share one connection.
function useEvents(path: string, onEvent: Listener) {
  const handler = useRef(onEvent)
  handler.current = onEvent
  useEffect(() => {
    if (!path) return
    const listener: Listener = (type, data) => handler.current(type, data)
    let s = streams.get(path)
    if (!s) {
      const listeners = new Set<Listener>()
      s = { listeners, stop: new AbortController() }
      streams.set(path, s)
      // Until an event came, a connection starts after the newest event (the page has just read the current
      // state); after one, it resumes from it.
      follow(path, { first: 'skip_backlog=true', signal: s.stop.signal, onEvent: (type, data) => [...listeners].forEach((l) => l(type, data)) })
    }
    s.listeners.add(listener)
    return () => {
      s.listeners.delete(listener)
      if (s.listeners.size === 0) {
        s.stop.abort()
        streams.delete(path)
      }
    }
  }, [path])
}

export type StreamOptions = {
  /** first is a query added to the first connection only (a reconnection resumes with Last-Event-ID). */
  first?: string
  signal: AbortSignal
  onEvent: (type: string, data: unknown, id: string) => void
  /** onStatus is told '' when a connection opens and the API's error message when one is refused
   * (e.g. 409: the project is not active); the stream keeps trying either way. */
  onStatus?: (error: string) => void
}

/**
 * follow reads the server-sent events at path until signal aborts, handing each to onEvent. It is the
 * dashboard's one SSE client (the project and organization event streams, the log tail): EventSource
 * cannot send the CSRF header the session cookie needs, so the stream is read with fetch; after a drop it
 * reconnects a second later with the last event's id (Last-Event-ID), missing nothing (after a refusal,
 * 2, 4 … up to 30 seconds later).
 */
export async function follow(path: string, { first = '', signal, onEvent, onStatus }: StreamOptions) {
  let last = ''
  let wait = 1000 // a refused connection (e.g. the project is not active) is tried again less and less often
  while (!signal.aborted) {
    let refused = false
    try {
      const headers: Record<string, string> = { 'X-Appliance-CSRF': '1', Accept: 'text/event-stream' }
      if (last) headers['Last-Event-ID'] = last
      const url = last || !first ? path : path + (path.includes('?') ? '&' : '?') + first
      const res = await fetch(url, { headers, credentials: 'same-origin', signal })
      if (!res.ok || !res.body) {
        let msg = `${path}: ${res.status}`
        try {
          msg = (await res.json()).error || msg
        } catch {
          // not the API's JSON error
        }
        onStatus?.(msg)
        wait = Math.min(30000, wait * 2)
        refused = true
        throw new Error(msg)
      }
      onStatus?.('')
      wait = 1000
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
      let buf = ''
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        buf += value
        let i
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i)
          buf = buf.slice(i + 2)
          let id = '', type = '', data = ''
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) id = line.slice(4)
            else if (line.startsWith('event: ')) type = line.slice(7)
            else if (line.startsWith('data: ')) data = line.slice(6)
          }
          if (!type) continue
          last = id || last
          let parsed: unknown = null
          try {
            parsed = JSON.parse(data)
          } catch {
            parsed = null
          }
          onEvent(type, parsed, id)
        }
      }
    } catch (e) {
      if (signal.aborted) return
      if (!refused) onStatus?.('the appliance does not answer: ' + String(e))
    }
    await new Promise((r) => setTimeout(r, wait))
  }
}

/** useProjectLoad is useLoad for what a project's job ends change (lists of backups, exports, jobs …): it
 * reloads on each of the project's events, polling only as a slow fallback. */
export function useProjectLoad<T>(projectID: string, load: () => Promise<T>, deps: unknown[], first?: () => T | undefined) {
  const r = useLoad(load, deps, 30000, first)
  useProjectEvents(projectID, () => r.reload())
  return r
}
