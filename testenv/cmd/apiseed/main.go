// Command apiseed prepares a data directory for bench/api.sh: it stores
// devices, leases, clusters with members and an admin API key, then prints
// shell assignments with signed requests (far expiry, so wrk can repeat them).
// It opens the store directly: run it before "ztpd serve".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"path/filepath"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

func main() {
	dir := flag.String("data-dir", "", "ztpd data directory (required)")
	devices := flag.Int("devices", 10000, "devices (with leases) to store")
	nclusters := flag.Int("clusters", 10, "clusters to create")
	members := flag.Int("members", 20, "member devices per cluster (first is the control plane)")
	limit := flag.Int("limit", 100, "page size of the signed GET /api/v1/devices")
	flag.Parse()
	if *dir == "" {
		log.Fatal("-data-dir is required")
	}
	st, err := boltstore.Open(*dir, boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	const batch = 2000
	for start := 0; start < *devices; start += batch {
		err := st.Update(func(tx core.Tx) error {
			for i := start; i < min(start+batch, *devices); i++ {
				mac := fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255)
				ip := fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250)
				kind := core.KindSONiC
				if i%4 == 0 {
					kind = core.KindVM
				}
				d := core.Device{ID: mac, Kind: kind, MAC: mac, Serial: fmt.Sprintf("SN%07d", i), Product: "Accton-AS7726-32X",
					Platform: "x86_64-accton_as7726_32x-r0", Hostname: fmt.Sprintf("leaf-%05d", i), IP: ip, Subnet: "fabric",
					State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
				l := core.Lease{IP: ip, MAC: mac, Hostname: d.Hostname, Subnet: "fabric", State: core.LeaseActive,
					Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now}
				if err := tx.Leases().Put(l); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	box, err := secretbox.OpenKeyring(filepath.Join(*dir, "secret.key"))
	if err != nil {
		log.Fatal(err)
	}
	keys := apikeys.New(st, box)
	info, secret, err := keys.Create("bench", apikeys.RoleAdmin)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := clusters.New(st, nil, clusters.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	v, err := cs.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: "1.31.4", URL: "http://10.99.0.1:8080/isos/v1.31.4.iso"})
	if err != nil {
		log.Fatal(err)
	}
	for c := 0; c < *nclusters; c++ {
		cl, j, err := cs.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: fmt.Sprintf("bench-%02d", c),
			ZoneID: cs.Zone().ID, VersionID: v.ID, ServiceOfferingID: "ztpd-medium", Size: *members - 1})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := cs.WaitJob(ctx, j.ID); err != nil {
			log.Fatal(err)
		}
		err = st.Update(func(tx core.Tx) error {
			for m := 0; m < *members; m++ {
				i := c**members + m
				if i >= *devices {
					return nil
				}
				mac := fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255)
				role := "worker"
				if m == 0 {
					role = "control-plane"
				}
				ms := core.Membership{Device: mac, Cluster: cl.ID, Role: role, Version: v.SemVer, State: core.StateJoined,
					History: []core.StateTransition{{State: core.StateJoined, At: now}}, Created: now, UpdatedAt: now}
				if err := tx.Memberships().Put(ms); err != nil {
					return err
				}
				// The cluster's roster, which the server lists members through.
				if err := tx.Memberships().Enlist(cl.ID, mac, role); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	cs.Close(ctx)

	// Signatures may lie at most api.max_signature_lifetime (20 minutes by
	// default) ahead; the benchmark's reads reuse these for its whole run.
	far := time.Now().Add(15 * time.Minute)
	signer := client.New("", info.APIKey, []byte(secret), nil)
	q := signer.SignCS(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}}, far)
	dq := url.Values{"limit": {fmt.Sprint(*limit)}}
	auth := signer.RESTAuthorization("GET", "/api/v1/devices", dq, nil, far)
	fmt.Printf("CS_QUERY='%s'\nDEVICES_QUERY='%s'\nREST_AUTH='%s'\n", q, dq.Encode(), auth)
}
