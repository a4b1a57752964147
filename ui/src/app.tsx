import { useEffect, useState } from 'preact/hooks'
import { del, get, onUnauthenticated, type Me } from './api'
import { Account } from './pages/account'
import { APIKeys } from './pages/apikeys'
import { Claim } from './pages/claim'
import { CLILogin } from './pages/clilogin'
import { Docs } from './pages/docs'
import { Members } from './pages/members'
import { Overview } from './pages/overview'
import { Project } from './pages/project'
import { Projects } from './pages/projects'
import { SignIn } from './pages/signin'
import { Webhooks } from './pages/webhooks'
import { match, navigate, onLinkClick, useLocation } from './router'
import { ErrorBox, message } from './ui'

const nav = [
  { href: '/overview', label: 'Overview' },
  { href: '/projects', label: 'Projects' },
  { href: '/api-keys', label: 'API keys' },
  { href: '/members', label: 'Members' },
  { href: '/webhooks', label: 'Webhooks' },
  { href: '/account', label: 'Account' },
  { href: '/docs', label: 'API' },
]

export function App() {
  const loc = useLocation()
  const [me, setMe] = useState<Me | null | undefined>(undefined) // undefined: loading; null: signed out
  const [error, setError] = useState('')
  const load = () =>
    get<Me>('/v1/me').then(setMe, (e) => {
      if (e.status === 401) setMe(null)
      else setError(message(e))
    })
  useEffect(() => {
    load()
    // A session that ends (expiry, sign-out elsewhere) brings the sign-in back; the URL stays, so signing
    // in again returns to the same page.
    return onUnauthenticated(() => setMe(null))
  }, [])
  // The API reference needs no sign-in (the document it reads is public).
  if (loc.split('?')[0] === '/docs') return <div class="shell" onClick={onLinkClick}><header><a class="brand" href="/projects">appliance</a><nav aria-label="Main"><a href="/docs" aria-current="page">API reference</a></nav></header><Docs /></div>
  if (error) return <ErrorBox error={error} />
  if (me === undefined) return <p class="loading">Loading…</p>
  if (me === null) return <SignIn onSignedIn={load} />

  const path = loc.split('?')[0]
  let page
  let m
  const org = !!me.organization
  if (path === '/' || path === '/projects') page = <Projects me={me} />
  else if (path === '/overview' && org) page = <Overview me={me} />
  else if (path === '/api-keys' && org) page = <APIKeys me={me} />
  else if (path === '/members' && org) page = <Members me={me} />
  else if (path === '/webhooks' && org) page = <Webhooks me={me} />
  else if (path === '/account') page = <Account me={me} />
  else if ((m = match('/projects/:id', path))) page = <Project id={m.id} me={me} />
  else if ((m = match('/projects/:id/:tab', path))) page = <Project id={m.id} tab={m.tab} me={me} />
  else if ((m = match('/cli/login/:id', path))) page = <CLILogin id={m.id} />
  else if ((m = match('/claim/:id', path))) page = <Claim id={m.id} me={me} />
  else page = <main><h1>Not found</h1><p>There is no page at {path}.</p></main>

  return (
    <div class="shell" onClick={onLinkClick}>
      <header>
        <a class="brand" href="/projects">
          appliance
        </a>
        <nav aria-label="Main">
          {nav.map((n) => (
            <a href={n.href} aria-current={path.startsWith(n.href) ? 'page' : undefined}>
              {n.label}
            </a>
          ))}
        </nav>
        <span class="org">{me.organization?.name}</span>
        <button
          class="link"
          onClick={async () => {
            await del('/v1/auth/sessions/current').catch(() => undefined)
            setMe(null)
            navigate('/projects', true)
          }}
        >
          Sign out
        </button>
      </header>
      {page}
    </div>
  )
}
