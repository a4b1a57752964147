import { get, type Schemas } from '../api'
import { Badge, Empty, ErrorBox, Table, plural, useLoad, when } from '../ui'
import { bytes, Meter } from './overview'
import { OperatorTabs } from './operator'

type NodeList = Schemas['NodeList']
type Node = Schemas['ClusterNode']
type Status = Schemas['Status']

/** statusClass is the badge class of a node's status, of the shared colours (alive green, joining amber,
 * draining amber, unavailable red). */
const statusClass: Record<Node['status'], string> = { alive: 'active', joining: 'pending', draining: 'pending', unavailable: 'down' }

/** memberName is the etcd member name of a node of that id (the cluster names members so). */
const memberName = (id: string) => 'appliance-' + id

/** shownProjects is how many of a node's project ids its row lists (the count says how many there are). */
const shownProjects = 3

/** Nodes is the operators' view of the cluster's nodes (GET /v1/nodes), polled: each node's status, etcd
 * role, whether it leads, its projects, its capacity as placement counts it, and its lease's last renewal;
 * above, the cluster's quorum and leader as /status reports them. A single node says so. */
export function Nodes() {
  const list = useLoad(() => get<NodeList>('/v1/nodes'), [], 5000)
  const status = useLoad(() => get<Status>('/status'), [], 5000)
  const cl = status.data?.cluster
  // The leader as the rows name nodes (their ids), not as etcd names its member.
  const leader = cl?.leader ? list.data?.nodes.find((n) => n.name === cl.leader || memberName(n.id) === cl.leader)?.id || cl.leader : ''
  return (
    <main>
      <h1>Nodes</h1>
      <OperatorTabs current="/operator/nodes" />
      <ErrorBox error={list.error} />
      {list.data && (
        <section class="card" aria-labelledby="cluster-summary-heading">
          <h2 id="cluster-summary-heading">{list.data.clustered ? 'Cluster' : 'A single node'}</h2>
          {!list.data.clustered && <p class="hint">This appliance is one node with its metadata in bbolt: no etcd, no other node. appliance cluster init makes it the first node of a cluster.</p>}
          {list.data.clustered && cl && (
            <p>
              {cl.quorum ? <Badge value="active" label="quorum" /> : <Badge value="down" label="no quorum" />} {plural(cl.members.length, 'member')}, leader{' '}
              {leader ? <code>{leader}</code> : <strong>none known</strong>}
              {' · '}answered by node <code>{list.data.node}</code>
              {cl.message && <span class="hint"> · {cl.message}</span>}
            </p>
          )}
          {list.data.clustered && status.error && <p class="hint">The cluster's status is unavailable: {status.error}</p>}
        </section>
      )}
      {list.data && list.data.nodes.length === 0 && <Empty>No node has registered yet.</Empty>}
      {list.data && list.data.nodes.length > 0 && (
        <div class="nodes-table">
          <Table cols={['Node', 'State', { label: 'Role', sm: true }, { label: 'Projects', sm: true }, { label: 'Capacity', sm: true }, { label: 'Lease', sm: true }]}>
            {list.data.nodes.map((n) => (
              <tr key={n.id}>
                <td>
                  {n.id ? <code>{n.id}</code> : 'this appliance'}
                  {n.id && n.id === list.data!.node && <span class="hint"> (answered)</span>}
                  <div class="hint">
                    {[n.name !== memberName(n.id) && n.name, n.advertise || n.public_host, n.version].filter(Boolean).join(' · ')}
                  </div>
                  <div class="hint sm-only">
                    memory {bytes(n.memory_bytes - n.memory_free_bytes)} of {bytes(n.memory_bytes)} · disk {bytes(n.disk_bytes - n.disk_free_bytes)} of {bytes(n.disk_bytes)} · ports{' '}
                    {n.ports_last - n.ports_first + 1 - n.ports_free} of {n.ports_last - n.ports_first + 1}
                  </div>
                </td>
                <td>
                  <Badge value={statusClass[n.status]} label={n.status} />
                  {n.leader && (
                    <>
                      {' '}
                      <span class="badge badge-active">leader</span>
                    </>
                  )}
                  <div class="hint sm-only">
                    {n.role} · {plural(n.projects.length, 'project')}
                  </div>
                </td>
                <td class="sm-hide">{n.role}</td>
                <td class="sm-hide node-projects">
                  {n.projects.length}
                  {n.projects.slice(0, shownProjects).map((id) => (
                    <div key={id} class="hint">
                      <code>{id}</code>
                    </div>
                  ))}
                  {n.projects.length > shownProjects && <div class="hint">and {n.projects.length - shownProjects} more</div>}
                </td>
                <td class="node-capacity sm-hide">
                  <Meter label="Memory" value={n.memory_bytes - n.memory_free_bytes} limit={n.memory_bytes} show={bytes} />
                  <Meter label="Disk" value={n.disk_bytes - n.disk_free_bytes} limit={n.disk_bytes} show={bytes} />
                  <Meter label="Ports" value={n.ports_last - n.ports_first + 1 - n.ports_free} limit={n.ports_last - n.ports_first + 1} show={String} />
                </td>
                <td class="sm-hide">
                  {n.heartbeat_age_seconds !== undefined ? (
                    <>
                      renewed {n.heartbeat_age_seconds}s ago
                      <div class="hint">{n.lease_ttl_seconds}s left</div>
                    </>
                  ) : (
                    <span class="hint">{list.data!.clustered ? 'no lease' : '—'}</span>
                  )}
                  {n.id && <div class="hint">registered {when(n.last_seen_at)}</div>}
                </td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      <p class="hint">Capacity counts what placement reserves for the projects on each node: their plans' memory, their storage limits, two ports each.</p>
    </main>
  )
}
