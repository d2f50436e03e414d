package ztphttp_test

import (
	"os"
	"testing"

	"github.com/ztpd/ztpd/testenv/e2etest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	e2etest.Cleanup()
	os.Exit(code)
}
