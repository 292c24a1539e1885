//go:build race

package o2iblnd

const raceEnabled = true
