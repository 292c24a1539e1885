//go:build !race

package lnet_test

const raceEnabled = false
