//go:build !race

package socklnd

const raceEnabled = false
