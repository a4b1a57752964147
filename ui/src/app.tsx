import type { ComponentChildren } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { del, earlyAnswers, get, onConnection, onUnauthenticated, type Me } from './api'
import { rememberOrgless } from './boot'
import { Invitations, InvitationBanner } from './pages/invitations'
import { Overview } from './pages/overview'
import { Project } from './pages/project'
import { Projects } from './pages/projects'
import { SignIn } from './pages/signin'
import { Palette } from './palette'
import { match, navigate, onLinkClick, useLocation } from './router'
import { ErrorBox, lazy, message, useTitle } from './ui'

// The API reference is a chunk of its own, fetched when it is opened; so are the pages a first visit
// seldom opens (the main chunk carries the projects, a project's first page and what every page needs).
const Docs = lazy(() => import('./pages/docs').then((m) => m.Docs))
const Account = lazy(() => import('./pages/account').then((m) => m.Account))
const APIKeys = lazy(() => import('./pages/apikeys').then((m) => m.APIKeys))
const Claim = lazy(() => import('./pages/claim').then((m) => m.Claim))
const CLILogin = lazy(() => import('./pages/clilogin').then((m) => m.CLILogin))
const Members = lazy(() => import('./pages/members').then((m) => m.Members))
const Webhooks = lazy(() => import('./pages/webhooks').then((m) => m.Webhooks))
const Operator = lazy(() => import('./pages/operator').then((m) => m.Operator))
const Nodes = lazy(() => import('./pages/operator_nodes').then((m) => m.Nodes))
const SignUp = lazy(() => import('./pages/signup').then((m) => m.SignUp))

const nav = [
  { href: '/overview', label: 'Overview' },
  { href: '/projects', label: 'Projects' },
  { href: '/api-keys', label: 'API keys' },
  { href: '/members', label: 'Members' },
  { href: '/webhooks', label: 'Webhooks' },
  { href: '/account', label: 'Account' },
  { href: '/docs', label: 'API' },
  { href: '/operator', label: 'Operator' }, // platform operators only
]

/** titles name the browser tab of each page (a project's page names its own, after the project). */
const titles: Record<string, string> = {
  '/': 'Projects',
  '/projects': 'Projects',
  '/overview': 'Overview',
  '/api-keys': 'API keys',
  '/members': 'Members',
  '/webhooks': 'Webhooks',
  '/account': 'Account',
  '/docs': 'API reference',
  '/operator': 'Organizations',
  '/operator/nodes': 'Nodes',
}

/** focusHeading moves the focus to the page's main heading (a screen reader then reads the new page), once
 * it is there: a page that loads first shows it a moment later. */
function focusHeading(): () => void {
  const tryFocus = () => {
    const h = document.querySelector<HTMLElement>('main h1')
    if (!h) return false
    if (!h.hasAttribute('tabindex')) h.setAttribute('tabindex', '-1')
    h.focus({ preventScroll: true })
    return true
  }
  if (tryFocus()) return () => undefined
  const obs = new MutationObserver(() => tryFocus() && obs.disconnect())
  obs.observe(document.body, { childList: true, subtree: true })
  const stop = setTimeout(() => obs.disconnect(), 10000)
  return () => {
    obs.disconnect()
    clearTimeout(stop)
  }
}

/** Shell is what every page has: the skip link and the one "connection lost" banner. */
function Shell({ children }: { children: ComponentChildren }) {
  const [lost, setLost] = useState(false)
  useEffect(() => onConnection(setLost), [])
  return (
    <>
      <a
        class="skip-link"
        href="#main"
        onClick={(e) => {
          e.preventDefault()
          focusHeading()
        }}
      >
        Skip to content
      </a>
      {lost && (
        <div class="connection-lost" role="alert">
          Connection to the appliance lost: retrying. What the page shows may be out of date.
        </div>
      )}
      {children}
    </>
  )
}

export function App() {
  const loc = useLocation()
  const [me, setMe] = useState<Me | null | undefined>(undefined) // undefined: loading; null: signed out
  const [error, setError] = useState('')
  const path0 = loc.split('?')[0]
  useTitle(me === null && path0 === '/signup' ? 'Sign up' : me === null && path0 !== '/docs' ? 'Sign in' : titles[path0] ?? (path0.startsWith('/projects/') && me ? null : path0.startsWith('/cli/login/') ? 'CLI login' : path0.startsWith('/claim/') ? 'Claim a database' : 'Not found'))
  // A route change (not the first page) moves the focus to the new page's heading.
  const first = useRef(true)
  useEffect(() => {
    if (first.current) {
      first.current = false
      return
    }
    return focusHeading()
  }, [path0])
  // The first page waits for the early answers it shows (boot.ts), to render once with all of them.
  const load = () =>
    Promise.all([get<Me>('/v1/me'), earlyAnswers()]).then(([me]) => {
      rememberOrgless(!me.organization)
      setMe(me)
    }, (e) => {
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
  if (loc.split('?')[0] === '/docs') return <Shell key="docs"><div class="shell" onClick={onLinkClick}><header><a class="brand" href="/projects">appliance</a><nav aria-label="Main"><a href="/docs" aria-current="page">API reference</a></nav></header><div id="main"><Docs /></div></div></Shell>
  if (error) return <ErrorBox error={error} />
  if (me === undefined) return <p class="loading">Loading…</p>
  if (me === null && path0 === '/signup') return <Shell key="signup"><div id="main"><SignUp onSignedUp={load} /></div></Shell>
  if (me === null) return <Shell key="signin"><div id="main"><SignIn onSignedIn={load} /></div></Shell>

  const path = loc.split('?')[0]
  let page
  let m
  const org = !!me.organization
  if (!org && !me.principal.is_admin) page = <Invitations me={me} id={match('/invitations/:id', path)?.id} onJoined={load} />
  else if ((m = match('/invitations/:id', path)) || path === '/invitations') page = <Invitations me={me} id={m?.id} onJoined={load} />
  // A platform operator in no organization lands on the organizations they host.
  else if (me.principal.is_admin && path === '/operator/nodes') page = <Nodes />
  else if (me.principal.is_admin && (path === '/operator' || (!org && (path === '/' || path === '/projects')))) page = <Operator me={me} />
  else if (path === '/' || path === '/projects') page = <Projects me={me} />
  else if (path === '/overview' && org) page = <Overview me={me} />
  else if (path === '/api-keys' && org) page = <APIKeys me={me} />
  else if (path === '/members' && org) page = <Members me={me} />
  else if (path === '/webhooks' && org) page = <Webhooks me={me} />
  else if (path === '/account') page = <Account me={me} />
  else if ((m = match('/projects/:id', path))) page = <Project id={m.id} me={me} />
  else if ((m = match('/projects/:id/:tab', path))) page = <Project id={m.id} tab={m.tab} me={me} />
  else if ((m = match('/cli/login/:id', path))) page = <CLILogin id={m.id} />
  else if ((m = match('/claim/:id', path))) page = <Claim id={m.id} me={me} />
  else if (path === '/signup') page = <main><h1>Sign up</h1><p>You are signed in{me.user ? ' as ' + me.user.email : ''}. Sign out first to create another organization with a new account.</p></main>
  else page = <main><h1>Not found</h1><p>There is no page at {path}.</p></main>

  const who = me.user ? me.user.name || me.user.email : ''
  // Each Shell has its key: signing in replaces the whole page (the focus starts again at its top).
  return (
    <Shell key="app">
    <div class="shell" onClick={onLinkClick}>
      <header>
        <a class="brand" href="/projects">
          appliance
        </a>
        <nav aria-label="Main">
          {nav.filter((n) => (n.href === '/operator' ? me.principal.is_admin : org || !['/overview', '/projects', '/api-keys', '/members', '/webhooks'].includes(n.href))).map((n) => (
            <a href={n.href} aria-current={path.startsWith(n.href) ? 'page' : undefined}>
              {n.label}
            </a>
          ))}
        </nav>
        <Palette me={me} />
        <span class="org">{me.organization?.name}</span>
        {who && (
          <span class="who" title={me.user!.email}>
            <span class="visually-hidden">Signed in as </span>
            {who}
          </span>
        )}
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
      {!path.startsWith('/invitations') && <InvitationBanner />}
      <div id="main">{page}</div>
    </div>
    </Shell>
  )
}
