import { useEffect, useRef, useState } from 'preact/hooks'
import { get, seg, type Me, type Project } from './api'
import { tabs } from './pages/project'
import { navigate } from './router'

type Item = { label: string; hint: string; href: string }

/** The organization's pages, as the header's navigation names them. */
const pages: Item[] = [
  { label: 'Overview', hint: 'page', href: '/overview' },
  { label: 'Projects', hint: 'page', href: '/projects' },
  { label: 'API keys', hint: 'page', href: '/api-keys' },
  { label: 'Members', hint: 'page', href: '/members' },
  { label: 'Webhooks', hint: 'page', href: '/webhooks' },
  { label: 'Account', hint: 'page', href: '/account' },
  { label: 'Invitations', hint: 'page', href: '/invitations' },
  { label: 'API reference', hint: 'page', href: '/docs' },
]

/** score is how well query matches text as a subsequence (higher is better; -1: no match): consecutive
 * letters and letters at word starts count more, so "bk" finds "Backups" and "prod set" a project's
 * settings. */
export function score(query: string, text: string): number {
  const q = query.toLowerCase().replace(/\s+/g, '')
  const t = text.toLowerCase()
  let s = 0
  let at = -1
  for (const c of q) {
    const i = t.indexOf(c, at + 1)
    if (i < 0) return -1
    s += i === at + 1 ? 3 : i === 0 || /[\s/·-]/.test(t[i - 1]) ? 2 : 1
    at = i
  }
  return s - t.length / 100
}

/** Palette is the command palette: Ctrl+K / Cmd+K (or the header's button) opens a dialog listing projects,
 * their tabs and the organization's pages, filtered as one types; arrows choose, Enter goes, Escape closes. */
export function Palette({ me }: { me: Me }) {
  const [open, setOpen] = useState(false)
  const [query, setQuery] = useState('')
  const [active, setActive] = useState(0)
  const [projects, setProjects] = useState<Project[]>([])
  const [error, setError] = useState('')
  const input = useRef<HTMLInputElement>(null)
  const opener = useRef<Element | null>(null)
  const org = !!me.organization

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 'k') {
        e.preventDefault()
        setOpen((o) => !o)
      }
    }
    addEventListener('keydown', onKey)
    return () => removeEventListener('keydown', onKey)
  }, [])
  useEffect(() => {
    if (!open) {
      // The box is emptied as the dialog closes, not as it opens: this effect runs a frame after the
      // dialog shows, and what a quick typist entered by then would be wiped.
      setQuery('')
      setActive(0)
      ;(opener.current as HTMLElement | null)?.focus?.()
      return
    }
    opener.current = document.activeElement
    input.current?.focus()
    if (org) get<{ projects: Project[] }>('/v1/projects').then((r) => setProjects(r.projects), (e) => setError(String(e.message ?? e)))
  }, [open])

  const items: Item[] = [
    ...projects.map((p) => ({ label: p.name, hint: 'project · ' + p.environment, href: '/projects/' + seg(p.id) })),
    ...pages.filter((p) => org || p.href === '/account' || p.href === '/invitations' || p.href === '/docs'),
    ...projects.flatMap((p) => tabs.map((t) => ({ label: p.name + ' · ' + t.label, hint: 'project tab', href: '/projects/' + seg(p.id) + '/' + t.id }))),
  ]
  const shown = query.trim()
    ? items
        .map((it) => ({ it, s: score(query, it.label) }))
        .filter((x) => x.s >= 0)
        .sort((a, b) => b.s - a.s)
        .map((x) => x.it)
    : items.slice(0, 12)
  const list = shown.slice(0, 50)
  const go = (it: Item | undefined) => {
    if (!it) return
    setOpen(false)
    navigate(it.href)
  }
  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === 'Escape') {
      e.preventDefault()
      setOpen(false)
    } else if (e.key === 'ArrowDown') {
      e.preventDefault()
      setActive((a) => Math.min(list.length - 1, a + 1))
    } else if (e.key === 'ArrowUp') {
      e.preventDefault()
      setActive((a) => Math.max(0, a - 1))
    } else if (e.key === 'Enter') {
      e.preventDefault()
      go(list[active])
    } else if (e.key === 'Tab') {
      e.preventDefault() // the focus stays in the dialog: its one control is the search box
      input.current?.focus()
    }
  }
  useEffect(() => {
    document.getElementById('palette-opt-' + active)?.scrollIntoView({ block: 'nearest' })
  }, [active, open])

  return (
    <>
      <button class="link palette-open" aria-haspopup="dialog" aria-keyshortcuts="Control+K Meta+K" onClick={() => setOpen(true)} title="Jump to a project or page (Ctrl+K)">
        Jump to… <kbd>Ctrl K</kbd>
      </button>
      {open && (
        <div class="palette-backdrop" onClick={(e) => e.target === e.currentTarget && setOpen(false)}>
          <div class="palette card" role="dialog" aria-modal="true" aria-label="Jump to a project or page" onKeyDown={onKeyDown}>
            <input
              ref={input}
              role="combobox"
              aria-expanded="true"
              aria-controls="palette-list"
              aria-autocomplete="list"
              aria-activedescendant={list.length ? 'palette-opt-' + active : undefined}
              aria-label="Project or page"
              placeholder="Type a project or page…"
              value={query}
              onInput={(e) => {
                setQuery((e.target as HTMLInputElement).value)
                setActive(0)
              }}
            />
            {error && <p class="error">{error}</p>}
            <ul id="palette-list" role="listbox" aria-label="Matches">
              {list.map((it, i) => (
                <li
                  id={'palette-opt-' + i}
                  key={it.href}
                  role="option"
                  aria-selected={i === active}
                  onMouseMove={() => setActive(i)}
                  onClick={() => go(it)}
                >
                  <span>{it.label}</span> <small>{it.hint}</small>
                </li>
              ))}
              {list.length === 0 && <li class="hint">Nothing matches.</li>}
            </ul>
          </div>
        </div>
      )}
    </>
  )
}
