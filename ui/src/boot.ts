import { prefetch, seg } from './api'
import { match } from './router'

// The first page's data, asked for as the script starts: who is signed in, and what the page at the
// address shows, all at once. Without this each call waits for the one before it (the app renders the
// page once /v1/me has answered, the project page asks for the connection strings once the project has
// answered): three round trips one after the other before the connection strings show, one now. The
// components take these answers through get(); signed out, the calls answer 401 and the sign-in shows.
// Only reads the page would make anyway, and only on the first load: later pages call as they mount.
const path = location.pathname
prefetch('/v1/me')
if (!path.startsWith('/invitations') && path !== '/docs') prefetch('/v1/me/invitations')
const m = match('/projects/:id', path) ?? match('/projects/:id/:tab', path)
if (m) {
  const p = '/v1/projects/' + seg(m.id)
  // The page waits for these (answered from the appliance's store, quickly) to show them in one render.
  prefetch(p, true)
  prefetch(p + '/connections', true) // every tab reads them (a project not yet active answers 409: nothing is lost)
  prefetch(p + '/jobs?limit=10', true)
  if (!m.tab) {
    // the Connect card's pickers
    prefetch(p + '/databases')
    prefetch(p + '/roles')
  }
} else if (path === '/' || path === '/projects') prefetch('/v1/projects')
