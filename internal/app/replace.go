package app

import (
	"context"
	"errors"

	"github.com/ztpd/ztpd/internal/positions"
)

// positionsPlan is the cabling plan in use, for the joiner; the positions
// service is built after it and before anything joins.
func (a *App) positionsPlan() *positions.Plan {
	if a.Positions == nil {
		return nil
	}
	return a.Positions.Plan()
}

// deleteNode deletes a replaced member's Node through the scale-down's
// NodeOps (the cluster's API server as ztpd's operator).
func (a *App) deleteNode(ctx context.Context, cluster, node string) error {
	if a.nodeOps == nil {
		return errors.New("no access to the cluster's API server")
	}
	return a.nodeOps.DeleteNode(ctx, cluster, node)
}
