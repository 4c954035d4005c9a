// Package lawtest: see lawtest.go (needs cgo; without it the package is empty and its tests
// are not built).
package lawtest
