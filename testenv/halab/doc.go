// Package halab runs three ztpd appliances on embedded etcd in network
// namespaces and checks what their DHCP clients see when one of
// them is killed or cut off: every client still ends with a lease, no
// address is given to two clients, no client gets two addresses, and the
// take-over happens within the session TTL. Its tests need root.
//
// The package holds what the tests and testenv/cmd/hastorm (the 10,000-switch boot
// storm against three appliances) share: Start builds the lab (a bridge,
// one namespace per appliance, the fleet's namespace behind a relay that
// broadcasts to every appliance) and starts the group; RunFleet drives the
// boot storm's fleet in its namespace; Capture and ReadReplies record every
// DHCP reply, DoubleGrants finds an address ACKed to two clients.
package halab
