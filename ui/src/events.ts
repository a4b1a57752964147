import { useEffect, useRef } from 'preact/hooks'

// useProjectEvents follows a project's event stream (GET /v1/projects/{id}/events); '' follows nothing.
export function useProjectEvents(projectID: string, onEvent: (type: string, data: unknown) => void) {
  useEvents(projectID ? '/v1/projects/' + encodeURIComponent(projectID) + '/events' : '', onEvent)
}

// useOrganizationEvents follows the stream of every project of an organization (GET
// /v1/organizations/{id}/events); '' follows nothing.
export function useOrganizationEvents(orgID: string, onEvent: (type: string, data: unknown) => void) {
  useEvents(orgID ? '/v1/organizations/' + encodeURIComponent(orgID) + '/events' : '', onEvent)
}

// useEvents follows an event stream and calls onEvent for each event. EventSource cannot send the CSRF
// header the session cookie needs, so the stream is read with fetch; it reconnects with the last event's
// id (Last-Event-ID) after a drop, missing nothing.
function useEvents(path: string, onEvent: (type: string, data: unknown) => void) {
  const handler = useRef(onEvent)
  handler.current = onEvent
  useEffect(() => {
    if (!path) return
    const stop = new AbortController()
    let last = ''
    let first = true
    const run = async () => {
      while (!stop.signal.aborted) {
        try {
          const headers: Record<string, string> = { 'X-Appliance-CSRF': '1', Accept: 'text/event-stream' }
          if (last) headers['Last-Event-ID'] = last
          // The first connection starts at the end of the log: the page has just read the current state.
          const url = path + (first ? '?last_event_id=' + (await newest(path)) : '')
          first = false
          const res = await fetch(url, { headers, credentials: 'same-origin', signal: stop.signal })
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
              try {
                handler.current(type, JSON.parse(data))
              } catch {
                handler.current(type, null)
              }
            }
          }
        } catch {
          if (stop.signal.aborted) return
        }
        await new Promise((r) => setTimeout(r, 1000))
      }
    }
    run()
    return () => stop.abort()
  }, [path])
}

/** newest is the position of the stream's newest event (the backlog a page need not replay). */
async function newest(path: string): Promise<string> {
  try {
    const res = await fetch(path + '?follow=false', {
      headers: { 'X-Appliance-CSRF': '1' },
      credentials: 'same-origin',
    })
    const text = await res.text()
    const ids = [...text.matchAll(/^id: (\d+)$/gm)]
    return ids.length ? ids[ids.length - 1][1] : ''
  } catch {
    return ''
  }
}
