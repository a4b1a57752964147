import { useEffect, useState } from 'preact/hooks'

// A small History API router: links are ordinary <a href> that navigate() intercepts.

const listeners = new Set<() => void>()

export function navigate(to: string, replace = false) {
  if (replace) history.replaceState(null, '', to)
  else history.pushState(null, '', to)
  listeners.forEach((f) => f())
  window.scrollTo(0, 0)
}

window.addEventListener('popstate', () => listeners.forEach((f) => f()))

export function useLocation(): string {
  const [loc, setLoc] = useState(location.pathname + location.search)
  useEffect(() => {
    const f = () => setLoc(location.pathname + location.search)
    listeners.add(f)
    return () => {
      listeners.delete(f)
    }
  }, [])
  return loc
}

/** match returns the named segments of pattern ("/projects/:id") in path, or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/')
  const s = path.split('?')[0].split('/')
  if (p.length !== s.length) return null
  const out: Record<string, string> = {}
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) out[p[i].slice(1)] = decodeURIComponent(s[i])
    else if (p[i] !== s[i]) return null
  }
  return out
}

/** Link is an anchor that navigates without reloading the page. */
export function onLinkClick(e: MouseEvent) {
  const a = (e.target as HTMLElement).closest('a')
  if (!a || a.target || a.hasAttribute('download') || e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return
  const url = new URL(a.href)
  if (url.origin !== location.origin || url.pathname.startsWith('/v1/')) return
  e.preventDefault()
  navigate(url.pathname + url.search)
}
