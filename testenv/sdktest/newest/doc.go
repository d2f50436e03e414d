// Package sdktest (newest/) runs the SDK acceptance test of the package
// above, sdk_test.go linked here, with cloudstack-go at its newest release,
// and the 4.21/4.22 parameters and fields only that release knows
// (sdk422_test.go).
package sdktest
