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

// useEvents follows an event stream and calls onEvent for each event; the components following one path
// share one connection. EventSource cannot send the CSRF header the session cookie needs, so the stream
// is read with fetch; it reconnects with the last event's id (Last-Event-ID) after a drop, missing nothing.
function useEvents(path: string, onEvent: Listener) {
  const handler = useRef(onEvent)
  handler.current = onEvent
  useEffect(() => {
    if (!path) return
    const listener: Listener = (type, data) => handler.current(type, data)
    let s = streams.get(path)
    if (!s) {
      s = { listeners: new Set(), stop: new AbortController() }
      streams.set(path, s)
      follow(path, s.listeners, s.stop.signal)
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

/** follow reads the stream at path until stop, handing each event to every listener. */
async function follow(path: string, listeners: Set<Listener>, stop: AbortSignal) {
  let last = ''
  while (!stop.aborted) {
    try {
      const headers: Record<string, string> = { 'X-Appliance-CSRF': '1', Accept: 'text/event-stream' }
      if (last) headers['Last-Event-ID'] = last
      // Until an event came, a connection starts after the newest event (the page has just read the current
      // state); after one, it resumes from it.
      const url = path + (last ? '' : '?skip_backlog=true')
      const res = await fetch(url, { headers, credentials: 'same-origin', signal: stop })
      if (!res.ok || !res.body) throw new Error(String(res.status))
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
          for (const l of [...listeners]) l(type, parsed)
        }
      }
    } catch {
      if (stop.aborted) return
    }
    await new Promise((r) => setTimeout(r, 1000))
  }
}

/** useProjectLoad is useLoad for what a project's job ends change (lists of backups, exports, jobs …): it
 * reloads on each of the project's events, polling only as a slow fallback. */
export function useProjectLoad<T>(projectID: string, load: () => Promise<T>, deps: unknown[]) {
  const r = useLoad(load, deps, 30000)
  useProjectEvents(projectID, () => r.reload())
  return r
}
