// Package dhcp is ztpd's DHCPv4 server: it gives SONiC switches, ONIE
// installers and CloudStack VMs their addresses and the URLs that start
// their provisioning, and records every client as a core.Device.
//
// # Request path
//
// Each request runs through the steps listed in handle.go, in order:
//
//  1. message     - DISCOVER, REQUEST, DECLINE, RELEASE or INFORM; anything else is dropped
//  2. relay       - giaddr only from a relay declared in Options.Relays (its
//     source address, giaddr and interface); option 82 or 118 without
//     giaddr is the client's own and dropped (relay.go)
//  3. subnet      - relay link selection (RFC 3527, option 118), else giaddr,
//     else ciaddr (unicast renewals), else the receiving interface's subnet
//  4. identify    - client key (client id, else MAC), class, reservation;
//     the cabling plan's position its relay proves (positions.go)
//  5. partition   - several appliances: only this one's buckets
//  6. lease       - offer, ack or nak (RFC 2131 §4.3.2), decline, release, inform
//  7. device      - the device record, written behind
//  8. options     - built-in, global, class, subnet, subnet-class, reservation;
//     in the client's request-list order, cut to its maximum message size
//  9. destination - RFC 2131 §4.1 (reply.go), then encode
//
// Classes: SONiC sends option 77 "SONiC-ZTP" (raw text; the RFC 3004 form is
// accepted too) and option 61 "SONiC##<product>##<serial>" (either marks it);
// ONIE sends option 60 "onie_vendor:<platform>"; a CloudStack VM has a
// reservation (without kind) or matches dhcp.vm. A reservation's kind
// overrides the packet. Everything else is unknown and still gets an address.
//
// A client is identified by its client identifier when it sends one, else by
// its hardware address. A client whose key has no binding takes over the
// binding of the same MAC in the subnet when either identity is the bare MAC,
// so an ONIE install and the SONiC it installs keep one address. A client id
// is the client's word: one that another hardware address holds a live
// lease under does not key this client (it is keyed by its own MAC), so
// repeating a client id or a SONiC serial never moves another device's
// lease, and only a reservation by MAC marks a lease reserved.
//
// # Durability
//
// The store (core.Store, bbolt) is the durable truth; memory is an index over
// it, rebuilt from it at start. The promise:
//
//   - An ACK that grants or extends a lease (DORA, INIT-REBOOT, RENEWING,
//     REBINDING) leaves the server only after a store transaction holding
//     that lease (address, owner MAC and client id, an expiry no earlier than
//     the ACK's) has been committed and fsynced. ACKs decided together share
//     one commit (group commit): a lone request is committed at once, under
//     load one commit every 8 ms carries all that is pending. A REQUEST arriving
//     while the client's committed lease is younger than a quarter of the
//     lease time is answered with the time that lease has left, without a
//     new write (the lease cache; the ACK still promises nothing that is not
//     already durable).
//   - OFFERs are not written: an offered address is held in memory for
//     dhcp.offer_hold. After a restart the client's REQUEST is checked
//     against the stored leases like any other.
//   - RELEASE, DECLINE, lease expiry and device/event records are written
//     behind (at most ~200 ms later, or with the next ACK's commit). Losing
//     one in a crash can only keep an address reserved until its stored
//     expiry, never free one early.
//   - Hence after kill -9 at any moment and a restart, every client that
//     received an ACK finds its lease with the same address, and the server
//     never gives an address to a second client while a stored lease for it
//     is unexpired.
//
// A failed commit (full disk, I/O error) sends no ACK; the changes are kept
// and retried with the next commit, and the clients retry their REQUESTs.
//
// # Throughput
//
// Workers (GOMAXPROCS per interface) read, decide under one mutex and send
// OFFERs at once. ACKs queue for the committer, which writes everything
// pending in one store.Batch (at most every 8 ms, as each commit's fsyncs
// cost kernel CPU) while the next batch fills, then hands the ACKs
// to a pacer that spreads them over the next commit cycle: a relay or a
// client sees a steady stream, not bursts that overflow its socket buffer.
// Leases, devices and events are encoded without reflection (records.go);
// device records, whose scattered keys cost a page write each, ride in small
// chunks when ACKs wait and in large ones otherwise.
//
// # Sockets
//
// Each interface gets a UDP socket on 0.0.0.0:67 bound to the device (a
// socket bound to the interface address never sees broadcasts), a send-only
// AF_PACKET socket for replies to clients that cannot answer ARP yet, and an
// abstract unix socket lock (LockName) that refuses a second ztpd on the
// same interface; server4's socket sets SO_REUSEPORT and would not.
package dhcp
