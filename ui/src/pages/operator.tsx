import { useState } from 'preact/hooks'
import { del, get, post, seg, type Me, type Schemas } from '../api'
import { Empty, ErrorBox, Form, SecretField, Table, useListAction, useLoad, when } from '../ui'
import { ProgramApplications, ServiceTokens } from './operator_programs'
import { OrgUsage, Plans, QuotaEditor } from './operator_plans'
import { SignupInvites } from './signupinvites'
import { OperatorReferrals } from './referrals'

type Org = Schemas['OrganizationSummary']

/** OperatorTabs is the operator area's own navigation: its organizations (and plans, programs, invites)
 * and the cluster's nodes. */
export function OperatorTabs({ current }: { current: string }) {
  return (
    <nav class="tabs" aria-label="Operator">
      {[
        { href: '/operator', label: 'Organizations' },
        { href: '/operator/nodes', label: 'Nodes' },
      ].map((t) => (
        <a href={t.href} aria-current={t.href === current ? 'page' : undefined}>
          {t.label}
        </a>
      ))}
    </nav>
  )
}

/** Operator is the platform operators' page: every organization with its usage against its quota (which
 * the operator edits), created with its first owner, suspended with a reason, resumed, deleted once it has
 * no project; and the plans. */
export function Operator({ me }: { me: Me }) {
  const list = useLoad(() => get<{ organizations: Org[] }>('/v1/organizations'), [])
  const [name, setName] = useState('')
  const [owner, setOwner] = useState('')
  const [made, setMade] = useState<{ name: string; owner: string; password: string } | null>(null)
  const [suspending, setSuspending] = useState<Org | null>(null)
  const [reason, setReason] = useState('')
  const [quotaOf, setQuotaOf] = useState<Org | null>(null)
  const [actionError, act] = useListAction(list)
  return (
    <main>
      <h1>Organizations</h1>
      <OperatorTabs current="/operator" />
      <p class="hint">You are a platform operator ({me.user?.email}): you host these organizations. Each sees only its own projects.</p>
      {made && (
        <section class="card notice" aria-live="polite">
          <h2>{made.name} created</h2>
          {made.password ? (
            <>
              <p>Its owner {made.owner} is a new user: their initial password is shown only now. Hand it over safely; they change it under Account.</p>
              <SecretField label="Initial password" value={made.password} />
            </>
          ) : (
            made.owner && <p>{made.owner} already had an account and is its owner now.</p>
          )}
          <button onClick={() => setMade(null)}>Done</button>
        </section>
      )}
      <section class="card">
        <h2>Create an organization</h2>
        <Form
          label="Create an organization"
          onSubmit={async () => {
            const res = await post<{ organization: { name: string }; initial_password: string }>('/v1/organizations', owner ? { name, owner_email: owner } : { name })
            setMade({ name: res.organization.name, owner, password: res.initial_password })
            setName('')
            setOwner('')
            list.reload()
          }}
        >
          <div class="row">
            <div>
              <label for="org-name">Name</label>
              <input id="org-name" required maxLength={100} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </div>
            <div>
              <label for="org-owner">Owner's email</label>
              <input id="org-owner" type="email" value={owner} onInput={(e) => setOwner((e.target as HTMLInputElement).value)} />
            </div>
            <button type="submit" class="primary">
              Create
            </button>
          </div>
        </Form>
      </section>
      {suspending && (
        <section class="card">
          <h2>Suspend {suspending.name}</h2>
          <p>Its API keys and sessions are refused at once with the reason below, and its projects' servers stop (their data is kept) until you resume it.</p>
          <Form
            label={'Suspend ' + suspending.name}
            onSubmit={async () => {
              await post('/v1/organizations/' + seg(suspending.id) + '/suspend', { reason })
              setSuspending(null)
              setReason('')
              list.reload()
            }}
          >
            <div class="row">
              <div>
                <label for="suspend-reason">Reason</label>
                <input id="suspend-reason" required maxLength={500} value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
              </div>
              <button type="submit" class="danger">
                Suspend
              </button>
              <button type="button" onClick={() => setSuspending(null)}>
                Cancel
              </button>
            </div>
          </Form>
        </section>
      )}
      {quotaOf && (
        <QuotaEditor
          org={quotaOf}
          onDone={() => {
            setQuotaOf(null)
            list.reload()
          }}
        />
      )}
      <ErrorBox error={list.error || actionError} />
      {list.data && list.data.organizations.length === 0 && <Empty>No organizations.</Empty>}
      {list.data && list.data.organizations.length > 0 && (
        <div class="org-table">
        <Table cols={['Organization', 'Usage / quota', { label: 'Members', sm: true }, { label: 'Created', sm: true }, { label: 'Actions', hidden: true }]}>
          {list.data.organizations.map((o) => (
            <tr key={o.id}>
              <td>
                {o.name}
                <div class="hint">
                  {o.slug} · {o.id}
                </div>
                {o.suspended_at ? (
                  <>
                    <span class="badge badge-critical">suspended</span>
                    <div class="hint">{o.suspended_reason}</div>
                  </>
                ) : (
                  <span class="badge badge-active">active</span>
                )}
              </td>
              <td>
                <OrgUsage orgID={o.id} quota={o.quota} />
              </td>
              <td class="sm-hide">{o.member_count}</td>
              <td class="sm-hide">{when(o.created_at)}</td>
              <td>
                <div class="cell-actions">
                  <button aria-label={'Quota of ' + o.name} onClick={() => setQuotaOf(o)}>
                    Quota
                  </button>
                  {o.suspended_at ? (
                    <button aria-label={'Resume ' + o.name} onClick={() => act(() => post('/v1/organizations/' + seg(o.id) + '/resume'))}>
                      Resume
                    </button>
                  ) : (
                    <button aria-label={'Suspend ' + o.name} onClick={() => setSuspending(o)}>
                      Suspend
                    </button>
                  )}
                  {o.project_count === 0 && (
                    <button
                      aria-label={'Delete ' + o.name}
                      onClick={() => confirm(`Delete ${o.name}? Its API keys are revoked and its members leave it.`) && act(() => del('/v1/organizations/' + seg(o.id)))}
                    >
                      Delete
                    </button>
                  )}
                </div>
              </td>
            </tr>
          ))}
        </Table>
        </div>
      )}
      <ProgramApplications />
      <ServiceTokens />
      <Plans />
      <SignupInvites />
      <OperatorReferrals />
    </main>
  )
}
