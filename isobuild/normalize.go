package isobuild

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// go-diskfs writes the ISO's structure (directory records, Rock Ridge entries,
// path tables, volume descriptors), but some of what it writes depends on the
// machine and the moment: the volume dates are time.Now(), the Rock Ridge
// attribute-change time is the staging file's ctime (which nothing can set),
// uid/gid are whoever ran the build, dates carry the local time zone, and its
// 8.3 collision renaming walks a Go map (random order). normalize rewrites
// exactly those fields, in place and without changing any length, so the same
// inputs always give the same bytes. It also places the file data: go-diskfs
// saw zero-length placeholders, so each file record gets its real extent and
// size here, and the data is copied in by the kernel afterwards.

// placement is where a file's data goes.
type placement struct {
	block uint32
	size  uint32
}

func normalize(meta []byte, epoch time.Time, place map[string]placement, totalBlocks uint32) error {
	r := bytes.NewReader(meta)
	v, err := readVolume(r, int64(len(meta)))
	if err != nil {
		return fmt.Errorf("re-reading go-diskfs output: %w", err)
	}
	if !v.rockRidge {
		return fmt.Errorf("go-diskfs output has no Rock Ridge entries")
	}
	recDate := recordDate(epoch)
	seen := 0
	w := &walker{r: r, size: int64(len(meta)), vol: v}
	err = w.walk(func(dir string, recs []*record) error {
		if err := fixShortNames(meta, dir, recs); err != nil {
			return err
		}
		for _, rec := range recs {
			copy(meta[rec.off+18:rec.off+25], recDate)
			for _, e := range rec.susp {
				patchSUSP(meta, e, recDate)
			}
			if rec.isDir {
				// Directory lengths in whole sectors, as mkisofs and xorriso write
				// them (go-diskfs writes the exact byte count).
				putBoth32(meta[rec.off+10:], roundSector(rec.size))
				continue
			}
			if rec.dot {
				continue
			}
			p := join(dir, rec.name)
			pl, ok := place[p]
			if !ok {
				return fmt.Errorf("go-diskfs wrote a file %q that was not staged", p)
			}
			if rec.size != 0 {
				return fmt.Errorf("placeholder %q has size %d, want 0", p, rec.size)
			}
			putBoth32(meta[rec.off+2:], pl.block)
			putBoth32(meta[rec.off+10:], pl.size)
			seen++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if seen != len(place) {
		return fmt.Errorf("go-diskfs wrote %d of %d files", seen, len(place))
	}
	// Primary volume descriptor: size, dates, the root record's date, and
	// identifier fields padded with spaces as ECMA-119 wants (go-diskfs pads
	// with NULs; blkid and udev expect spaces, as genisoimage writes).
	pvd := meta[pvdOffset : pvdOffset+sectorSize]
	putBoth32(pvd[80:], totalBlocks)
	copy(pvd[156+18:156+25], recDate)
	putBoth32(pvd[156+10:], roundSector(v.root.size))
	for _, f := range [][2]int{{8, 32}, {40, 32}, {190, 128}, {318, 128}, {446, 128}, {574, 128}, {702, 37}, {739, 37}, {776, 37}} {
		padSpaces(pvd[f[0] : f[0]+f[1]])
	}
	dec := volumeDate(epoch)
	copy(pvd[813:830], dec) // creation
	copy(pvd[830:847], dec) // modification
	// expiration and effective: "not specified", as genisoimage writes them.
	copy(pvd[847:864], unspecifiedDate())
	copy(pvd[864:881], unspecifiedDate())
	return nil
}

func roundSector(n uint32) uint32 {
	return uint32((uint64(n) + sectorSize - 1) / sectorSize * sectorSize)
}

func putBoth32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b[0:4], v)
	binary.BigEndian.PutUint32(b[4:8], v)
}

func padSpaces(b []byte) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return
	}
	for i := end; i < len(b); i++ {
		b[i] = ' '
	}
}

// recordDate is the 7-byte directory-record date, UTC.
func recordDate(t time.Time) []byte {
	t = t.UTC()
	return []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// volumeDate is the 17-byte volume descriptor date, UTC.
func volumeDate(t time.Time) []byte {
	t = t.UTC()
	b := []byte(fmt.Sprintf("%04d%02d%02d%02d%02d%02d%02d", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/1e7))
	return append(b, 0)
}

func unspecifiedDate() []byte { return append([]byte("0000000000000000"), 0) }

// patchSUSP fixes the Rock Ridge fields that vary between machines.
func patchSUSP(meta []byte, e suspEntry, recDate []byte) {
	d := meta[e.off : e.off+int64(len(e.data))]
	switch e.sig() {
	case "TF": // every timestamp -> the epoch
		if len(d) < 5 {
			return
		}
		flags := d[4]
		size := 7
		if flags&0x80 != 0 {
			size = 17
		}
		p := 5
		for bit := 0; bit < 7; bit++ {
			if flags&(1<<bit) == 0 {
				continue
			}
			if p+size > len(d) {
				return
			}
			if size == 7 {
				copy(d[p:p+7], recDate)
			}
			p += size
		}
	case "PX": // uid, gid -> 0; serial number in both byte orders
		if len(d) < 36 {
			return
		}
		putBoth32(d[20:], 0)
		putBoth32(d[28:], 0)
		if len(d) >= 44 {
			// go-diskfs writes the serial as one little-endian uint64; RRIP 1.12
			// wants a both-byte-order uint32.
			putBoth32(d[36:], binary.LittleEndian.Uint32(d[36:40]))
		}
	}
}

// fixShortNames gives the ISO 9660 (8.3) names the values go-diskfs would give
// them if it resolved name collisions in a fixed order. Rock Ridge readers never
// show these names; only plain ISO 9660 readers do.
func fixShortNames(meta []byte, dir string, recs []*record) error {
	kids := recs[2:]
	want := shortNames(kids)
	for i, rec := range kids {
		if rec.id == want[i] {
			continue
		}
		if rec.isDir {
			return fmt.Errorf("directory names in %q collide in their ISO 9660 8.3 form (%s); rename one so the build stays reproducible", "/"+dir, rec.name)
		}
		if len(rec.id) != len(want[i]) {
			return fmt.Errorf("file names in %q collide in their ISO 9660 8.3 form too densely to build reproducibly (%s); rename some", "/"+dir, rec.name)
		}
		copy(meta[rec.off+33:rec.off+33+int64(len(want[i]))], want[i])
	}
	return nil
}

var invalidShort = regexp.MustCompile("[^A-Z0-9_]")

// shortNameExt mirrors go-diskfs calculateShortnameExtension.
func shortNameExt(name string) (string, string) {
	base, ext, _ := strings.Cut(name, ".")
	base = invalidShort.ReplaceAllString(strings.ToUpper(base), "_")
	ext = invalidShort.ReplaceAllString(strings.ToUpper(ext), "_")
	if len(ext) > 3 {
		ext = ext[:3]
	}
	if len(base) > 8 {
		base = base[:8]
	}
	return base, ext
}

// shortNames mirrors go-diskfs walkTree + resolveCollisionGroup, but resolves
// the collision groups in sorted order instead of map order.
func shortNames(kids []*record) []string {
	bases := make([]string, len(kids))
	exts := make([]string, len(kids))
	groups := map[string][]int{}
	full := func(i int) string {
		if exts[i] == "" {
			return bases[i]
		}
		return bases[i] + "." + exts[i]
	}
	for i, k := range kids {
		b, e := shortNameExt(k.name)
		if k.isDir {
			e = "" // go-diskfs keeps no extension for directories
		}
		bases[i], exts[i] = b, e
		groups[full(i)] = append(groups[full(i)], i)
	}
	keys := make([]string, 0, len(groups))
	for k, g := range groups {
		if len(g) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		g := groups[key]
		base, ext := bases[g[0]], exts[g[0]]
		taken := map[string]bool{}
		for i := range kids {
			taken[full(i)] = true
		}
		for digits := len(fmt.Sprint(len(g) - 1)); digits < 8; digits++ {
			b := base
			if len(b) > 8-digits {
				b = b[:8-digits]
			}
			limit := 1
			for j := 0; j < digits; j++ {
				limit *= 10
			}
			change, resolved := 0, true
			for _, i := range g {
				found := false
				for change < limit {
					cand := fmt.Sprintf("%s%0*d", b, digits, change)
					name := cand
					if ext != "" {
						name += "." + ext
					}
					change++
					if !taken[name] {
						bases[i] = cand
						taken[name] = true
						found = true
						break
					}
				}
				if !found {
					resolved = false
					break
				}
			}
			if resolved {
				break
			}
		}
	}
	out := make([]string, len(kids))
	for i, k := range kids {
		if k.isDir {
			out[i] = bases[i]
		} else {
			out[i] = bases[i] + "." + exts[i] + ";1"
		}
	}
	return out
}
