// Package halab runs three ztpd appliances on embedded etcd in network
// namespaces (issue 18) and checks what their DHCP clients see when one of
// them is killed or cut off: every client still ends with a lease, no
// address is given to two clients, no client gets two addresses, and the
// take-over happens within the session TTL. Its tests need root; the
// package itself only holds the capture reader they share (pcap.go).
package halab
