// Package scsi is softib's SCSI target core: logical units backed by a
// file or by memory, the block commands Linux's sd driver and the common
// tools send (SPC-4/SBC-3: INQUIRY with the VPD pages sd reads, READ
// CAPACITY, READ/WRITE, SYNCHRONIZE CACHE, MODE SENSE, REPORT LUNS,
// REQUEST SENSE, UNMAP, WRITE SAME), CHECK CONDITION with fixed-format
// sense data for everything else, and the task management functions the
// initiators use (ABORT TASK, LOGICAL UNIT RESET).
//
// It knows no transport: the SRP and iSER targets (packages storage/srp
// and storage/iser) move the data and hand each command's CDB and buffer
// to [Target.Execute].
package scsi
