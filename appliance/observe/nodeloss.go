package observe

import (
	"fmt"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

const (
	// AlertNodeUnavailable is raised (critical) on each project of a cluster node whose lease lapsed, and
	// resolved when the node holds its lease again.
	AlertNodeUnavailable = api.AlertNodeUnavailable
	// EventProjectUnavailable and EventProjectAvailable are appended as that alert is raised and resolved.
	EventProjectUnavailable = "project.unavailable"
	EventProjectAvailable   = "project.available"
)

// NodeLossEvent is the data of project.unavailable and project.available.
type NodeLossEvent struct {
	ProjectID     string    `json:"project_id"`
	NodeID        string    `json:"node_id"`
	RuntimeStatus string    `json:"runtime_status,omitempty" doc:"project.available: the status it returned to"`
	At            time.Time `json:"at"`
}

// NodeLost tells, inside tx, that the node hosting prj lost its lease: the project.unavailable event
// and the node_unavailable alert (critical).
func (s *Service) NodeLost(tx *store.Tx, prj *store.Project, node string, at time.Time) error {
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	c := alertCondition{kind: AlertNodeUnavailable, raised: true, severity: SeverityCritical, observed: 1,
		message: fmt.Sprintf("the cluster node %s that hosts this project lost its lease (down or cut off from the others) at %s; the project is unavailable until it is back or the project is restored on another node",
			node, at.UTC().Format(time.RFC3339)),
		event: EventProjectUnavailable, eventData: NodeLossEvent{ProjectID: prj.ID, NodeID: node, At: at.UTC()}}
	_, err = s.applyAlert(tx, prj, open[AlertNodeUnavailable], c, at)
	return err
}

// NodeBack tells, inside tx, that the node hosting prj holds its lease again and prj's runtime status is
// status again: the project.available event, and the node_unavailable alert resolved.
func (s *Service) NodeBack(tx *store.Tx, prj *store.Project, node, status string, at time.Time) error {
	if err := s.host.AppendEvent(tx, EventProjectAvailable, prj.OrganizationID, prj.ID,
		NodeLossEvent{ProjectID: prj.ID, NodeID: node, RuntimeStatus: status, At: at.UTC()}); err != nil {
		return err
	}
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	if a := open[AlertNodeUnavailable]; a != nil {
		_, err = s.applyAlert(tx, prj, a, alertCondition{kind: AlertNodeUnavailable, observed: a.ObservedValue}, at)
	}
	return err
}
