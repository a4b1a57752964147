import { prefetch, seg } from './api'
import { match } from './router'
import { when } from './ui'

// The first page's data, asked for as the script starts: who is signed in, and what the page at the
// address shows, all at once. Without this each call waits for the one before it (the app renders the
// page once /v1/me has answered, the project page asks for the connection strings once the project has
// answered): three round trips one after the other before the connection strings show, one now. The
// components take these answers through get(); signed out, the calls answer 401 and the sign-in shows.
// Only reads the page would make anyway, and only on the first load: later pages call as they mount.
const path = location.pathname
const m = match('/projects/:id', path) ?? match('/projects/:id/:tab', path)
const p = m && '/v1/projects/' + seg(m.id)
// The page waits for a project's calls (answered from the appliance's store, quickly) to show them in one
// render. The connection strings first: every tab reads them (a project not yet active answers 409:
// nothing is lost). Not the Connect card's pickers (databases, roles): those ask the project's own server,
// and on a busy machine that work delayed the connection strings; they fill in just after.
if (p) prefetch(p + '/connections', true)
prefetch('/v1/me')
if (p) {
  prefetch(p, true)
  prefetch(p + '/jobs?limit=10', true)
  prefetch(p + '/summary') // the home's figures: the first render does not wait for them
} else if ((path === '/' || path === '/projects') && !orgless()) prefetch('/v1/projects')
if (!path.startsWith('/invitations') && path !== '/docs') prefetch('/v1/me/invitations')

// A platform operator in no organization has no project list of their own (GET /v1/projects answers 400
// without ?organization_id): the last sign-in on this browser says whether the list is worth asking for.
const orglessKey = 'appliance.orgless'
function orgless(): boolean {
  try {
    return localStorage.getItem(orglessKey) === '1'
  } catch {
    return false
  }
}
export function rememberOrgless(yes: boolean) {
  try {
    if (yes) localStorage.setItem(orglessKey, '1')
    else localStorage.removeItem(orglessKey)
  } catch {
    // storage refused (private mode): the early call is made and answers 400, as before
  }
}

// While the answers are on their way: the first date shown builds the browser's date formatter, which
// takes its locale's data (about 20 ms, more on a slow CPU), otherwise on the way of the first render.
when(new Date().toISOString())
