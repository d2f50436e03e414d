// Command ztpseed fills a ztpd data directory with N SONiC switches (device
// records and DHCP leases, as the DHCP server would leave them) and the SONiC
// image their profile asks for, for bench/ztp-json.sh. Run it while no ztpd
// uses the directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

func main() {
	dir := flag.String("data-dir", "", "ztpd data directory")
	n := flag.Int("devices", 1000, "number of switches")
	flag.Parse()
	if *dir == "" || *n < 1 || *n > 60000 {
		log.Fatal("usage: ztpseed --data-dir DIR [--devices 1..60000]")
	}
	db, err := boltstore.Open(*dir, boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ims, err := imagestore.Open(db, *dir)
	if err != nil {
		log.Fatal(err)
	}
	img := strings.Repeat("bench SONiC 202405.1 image\n", 4096)
	if _, _, err := ims.Add(context.Background(), strings.NewReader(img),
		imagestore.Meta{Name: "sonic-bench-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, ""); err != nil {
		log.Fatal(err)
	}
	now := time.Now().UTC()
	err = db.Update(func(tx core.Tx) error {
		for k := 0; k < *n; k++ {
			mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", k>>16&0xff, k>>8&0xff, k&0xff)
			ip := fmt.Sprintf("10.99.%d.%d", 100+k/250, 1+k%250)
			d := core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, Serial: fmt.Sprintf("BENCH%06d", k),
				Product: "Accton-AS7712-32X", Platform: "x86_64-accton_as7712_32x-r0", IP: ip, Subnet: "bench",
				ClientID: fmt.Sprintf("SONiC##Accton-AS7712-32X##BENCH%06d", k), State: core.StateLeased,
				FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			l := core.Lease{IP: ip, MAC: mac, Subnet: "bench", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("seeded %d switches\n", *n)
}
