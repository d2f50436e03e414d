package controlplane

import (
	"context"
	"net"

	"github.com/ztpd/ztpd/testenv/netns"
)

// NetnsRun runs commands inside a network namespace (Config.Run).
func NetnsRun(ns *netns.NS) Runner { return ns.Command }

// NetnsDial dials from inside a network namespace (Config.Dial): the socket
// is made on a thread that entered the namespace and stays in it.
func NetnsDial(ns *netns.NS) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
