import { useState } from 'preact/hooks'
import { get, post, seg, type Me, type Schemas } from '../api'
import { Badge, CopyField, Empty, ErrorBox, Table, isOrgAdmin, useAction, useLoad, when } from '../ui'

type ReferralCode = Schemas['ReferralCode']
type Referral = Schemas['Referral']

/** Referrals is the organization's referral code (made on demand, with its sign-up link to copy) and the
 * organizations that signed up with it. */
export function Referrals({ me }: { me: Me }) {
  const base = '/v1/organizations/' + seg(me.organization!.id)
  const code = useLoad(() => get<{ referral_code: ReferralCode | null }>(base + '/referral-code').then((r) => r.referral_code), [base])
  const list = useLoad(() => get<{ referrals: Referral[] }>(base + '/referrals'), [base])
  const [actionError, act] = useAction()
  const [busy, setBusy] = useState(false)
  const rc = code.data
  return (
    <section class="card" aria-labelledby="referrals-heading">
      <h2 id="referrals-heading">Referrals</h2>
      <ErrorBox error={code.error || list.error || actionError} />
      {rc === null && (
        <>
          <p>Share a referral code: when an organization that signs up with it pays its first invoice, yours gets a discount from the billing provider.</p>
          {isOrgAdmin(me) ? (
            <button
              class="primary"
              disabled={busy}
              onClick={() => {
                setBusy(true)
                act(() => post(base + '/referral-code', {}).then(() => code.reload())).finally(() => setBusy(false))
              }}
            >
              Create a referral code
            </button>
          ) : (
            <p class="hint admin-only">Only an owner or an admin of the organization can create its referral code.</p>
          )}
        </>
      )}
      {rc && (
        <>
          <dl class="facts">
            <dt>Code</dt>
            <dd>
              <code class="referral-code">{rc.code}</code>
            </dd>
            {rc.discount_id && (
              <>
                <dt>Discount for who signs up</dt>
                <dd>{rc.discount_id}</dd>
              </>
            )}
          </dl>
          <CopyField label="Sign-up link" value={rc.signup_url} />
        </>
      )}
      {list.data && list.data.referrals.length === 0 && rc && <Empty>No organization signed up with your code yet.</Empty>}
      {list.data && list.data.referrals.length > 0 && <ReferralTable referrals={list.data.referrals} />}
    </section>
  )
}

/** ReferralTable lists referrals: the referred organization, status, reward and date; with referrer (the
 * operators' list), the referrer too. */
function ReferralTable({ referrals, referrer = false }: { referrals: Referral[]; referrer?: boolean }) {
  return (
    <Table cols={[...(referrer ? ['Referrer'] : []), referrer ? 'Referred' : 'Organization', 'Status', { label: 'Reward', sm: true }, { label: 'Since', sm: true }]}>
      {referrals.map((r) => (
        <tr key={r.id}>
          {referrer && (
            <td>
              <code>{r.referrer_organization_id}</code>
              <div class="hint">{r.code}</div>
            </td>
          )}
          <td>
            <code>{r.referred_organization_id}</code>
          </td>
          <td>
            <Badge value={r.status} />
            {r.void_reason && <div class="hint">{r.void_reason}</div>}
          </td>
          <td class="sm-hide">{r.reward_code || r.reward_discount_id || '—'}</td>
          <td class="sm-hide">
            {when(r.created_at)}
            {r.rewarded_at && <div class="hint">rewarded {when(r.rewarded_at)}</div>}
          </td>
        </tr>
      ))}
    </Table>
  )
}

/** OperatorReferrals is the Operator page's list of every referral, newest first, by status. */
export function OperatorReferrals() {
  const [status, setStatus] = useState('')
  const list = useLoad(() => get<{ referrals: Referral[] }>('/v1/referrals' + (status ? '?status=' + status : '')), [status])
  return (
    <section class="card" aria-labelledby="operator-referrals-heading">
      <h2 id="operator-referrals-heading">Referrals</h2>
      <label for="operator-referrals-status">Status</label>
      <select id="operator-referrals-status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
        <option value="">all</option>
        <option value="pending">pending</option>
        <option value="rewarded">rewarded</option>
        <option value="void">void</option>
      </select>
      <ErrorBox error={list.error} />
      {list.data && list.data.referrals.length === 0 && <Empty>No referrals{status ? ' ' + status : ''}.</Empty>}
      {list.data && list.data.referrals.length > 0 && <ReferralTable referrals={list.data.referrals} referrer />}
    </section>
  )
}
