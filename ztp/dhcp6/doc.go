// Package dhcp6 is ztpd's DHCPv6 server (RFC 8415): it gives SONiC
// switches, ONIE installers and CloudStack VMs on IPv6 management networks
// their addresses (IA_NA) and the URL that starts their provisioning
// (option 59), and records every lease holder as a core.Device, as the
// DHCPv4 server (ztp/dhcp) does on IPv4.
//
// # Request path
//
// Each message runs through the steps listed in handle.go, in order:
//
//  1. message     - Solicit, Request, Confirm, Renew, Rebind, Release,
//     Decline, Information-request; server identifier as RFC 8415 §16
//     says (a Request, Renew, Release or Decline for another server is
//     ignored)
//  2. relay       - Relay-Forw (nested up to 32 deep) only from a relay
//     declared in Options.Relays: its source address, interface and the
//     link address it states
//  3. subnet      - the link address of the relay closest to the client,
//     else the receiving interface's subnet
//  4. partition   - several appliances: only clients whose DUID hashes to
//     one of this appliance's buckets (group.go)
//  5. identify    - DUID (client identifier), the MAC where one is known
//     (DUID-LLT/LL, else the client link-layer address option 79 a relay
//     added), class, reservation (by DUID, then by MAC)
//  6. lease       - advertise, grant (Request, Rapid Commit), extend (Renew,
//     Rebind), release, decline, confirm
//  7. device      - the device record of a lease holder, written behind
//  8. encode      - server and client identifiers, Rapid Commit, the IAs
//     and status codes, then the options the client asked for (ORO) only
//  9. destination - the client, or back through every relay (Relay-Repl
//     echoing each relay's interface-id)
//
// Classes: SONiC sends user class (15) "SONiC-ZTP" (or vendor class 16
// "SONiC-ZTP" / "SONiC##<product>##<serial>"); ONIE's udhcpc6 sends vendor
// class data "onie_vendor:<platform>"; a VM has a reservation without kind
// or a MAC under dhcp.vm. A reservation's kind overrides the packet.
// Option 59 carries ztp.json (SONiC) or the ONIE installer URL, its host a
// bracketed IPv6 literal; DNS servers (23) and the domain list (24) come
// from the subnet; other options (239 SONiC's provisioning script) from
// the subnet's options and class options by DHCPv6 code.
//
// One client (DUID) holds one address per subnet: the first IA_NA of a
// message gets it, further IA_NAs NoAddrsAvail. A hint outside the pools
// is not given; in a Reply, addresses the client named that it does not
// hold come back with lifetimes 0; a Confirm for an address off the link
// is NotOnLink.
//
// # Durability
//
// As for DHCPv4: the store is the durable truth, memory an index over it.
// A Reply that grants or extends a lease (Request, Renew, Rebind, Solicit
// with Rapid Commit) leaves only after the store transaction holding the
// lease (address, DUID as client id, MAC when known, expiry) has been
// committed and fsynced; replies decided together share one commit (one
// at most every 16 ms under load). A Request (or Rapid Commit Solicit) for
// the lease the client holds, committed less than a quarter of the lease
// time ago, gets what that durable lease has left, without a write
// (dhcplease.Cached, as DHCPv4); Renew and Rebind are always written. An
// Advertise is not written: the address is held in memory for
// dhcp.offer_hold, so a flood of Solicits with made-up DUIDs stores
// nothing. Release, Decline, expiry and device records are written behind. Hence after kill -9 every client that got a Reply
// keeps its address, and no address goes to a second client while a
// stored lease of it is unexpired.
//
// The server's DUID (a DUID-LLT of the first interface's MAC, made once)
// is stored with the settings, so clients see the same server after a
// restart, and appliances sharing a store answer as one server.
//
// # Several appliances
//
// With Options.Partition and Options.Feed (internal/ha on an etcd store),
// the server is one of a group, as the DHCPv4 server is: it answers the
// buckets (RFC 3074 hash of the DUID) its appliance holds, gives new
// addresses only from the address blocks its appliance claimed, commits
// leases only under the session they were decided under (the fence), and
// mirrors every appliance's leases from the feed, so it renews the
// clients of an appliance whose buckets it took over (group.go).
//
// # Sockets
//
// Each interface gets a UDP socket on [::]:547 bound to it and joined to
// ff02::1:2 there, and an abstract unix socket lock (LockName) that refuses
// a second ztpd on the same interface.
package dhcp6
