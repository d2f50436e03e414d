package ipv6test

import (
	"os"
	"testing"

	"github.com/ztpd/ztpd/testenv/e2etest"
	"github.com/ztpd/ztpd/testenv/hermetic"
)

func TestMain(m *testing.M) {
	hermetic.Isolate()
	code := m.Run()
	e2etest.Cleanup()
	os.Exit(code)
}
