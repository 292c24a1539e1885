package rxe

// Locking and scheduling: every mutex in rxe, what it guards, the order
// in which they nest, and the invariants the engine relies on. Fields
// carry "guarded by" notes that refer back here.
//
// # Mutexes (outermost first where they nest)
//
//	mcastTable.mu     Device.mcast: groups, total (mcast.go). Taken by
//	                  AttachMcast/DetachMcast and by removeQP, never with
//	                  QP.mu or Device.mu held.
//	Device.defMu      Device.deferred, nDeferred and QP.listed: the QPs
//	                  whose responses wait for the application (sched.go).
//	receive token     rxShard.tok, one per receive shard (shard.go,
//	                  busypoll.go): the right to read the shard's socket;
//	                  guards the shard's rb, st and ICRC cache encap.
//	                  Taken with TryLock by a CQ poller, with Lock by the
//	                  shard's receive goroutine. Tokens of different
//	                  shards never nest.
//	QP.mu             the QP engine: state, attr, dst, mtu, sq, rq, cap,
//	                  the roles (req, resp, comp), both lanes' cur
//	                  batches, the round flags (woke, hdue, pushed,
//	                  roundIn, roundReq, respDue),
//	                  encap, sport (written also under both lane
//	                  mutexes, see qpSport), dead, timerAt, sqdEvent,
//	                  inSpare. QP.drainC waits on it.
//	QP.inMu           QP.inq (the inbound ring) and the swap of inSpare.
//	txLane.mu         a lane's out batch, from hand-off (take) until it
//	                  is on the socket (txbatch.go); QP.txMsgs when both
//	                  lanes' are held. reqTx.mu before respTx.mu.
//	fastMR.mu         an MR's staged fast-registration map (fastreg.go).
//	keyTable.mu       Device.keys (RW): MR and MW keys, indices; the
//	                  writes to keyTable.idx and MR.wireKey (lookup reads
//	                  them without it).
//	MW.mu             a memory window's binding (mw.go).
//	SRQ.mu            an SRQ's ring, limit and dead flag (cq.go).
//	CQ.mu             a CQ's ring, arming and overrun state (cq.go);
//	                  CQ.waitCond waits on it.
//	sportTable.mu     Device.sports: source-port sockets (sport.go).
//	capturer.mu       a packet capture's buffers (capture.go).
//	Device.mu         nextQPN, the cqs and qps maps and qpTable writes
//	                  (qptable.go; reads are lock-free).
//	Device.evMu       serialises raise (the async event queue).
//
// The order edges in use (a → b: b is taken while a is held):
//
//	mcastTable.mu → QP.mu                     (AttachMcast: is it dead?)
//	receive token → QP.inMu                   (queueBatch → enqueue)
//	receive token → Device.defMu → QP.mu      (rxShard.rxLoopPoll →
//	                                           Device.flushDeferred)
//	receive token → QP.mu (TryLock only)      (runBatch → runInline)
//	QP.mu → QP.inMu                           (process)
//	QP.mu → txLane.mu (req, then resp)        (take, add, swapSport)
//	txLane.mu → capturer.mu                   (writeAll)
//	QP.mu → CQ.mu                             (pushCQ → CQ.push)
//	QP.mu → SRQ.mu                            (responder.takeRWQE)
//	QP.mu → fastMR.mu → keyTable.mu → MW.mu   (REG_MR, BIND_MW, LOCAL_INV,
//	                                           remote key checks)
//	QP.mu → sportTable.mu                     (openSport, updateSport)
//	QP.mu → Device.evMu                       (raise from a round: fail,
//	                                           COMM_EST, SQ_DRAINED, CQ
//	                                           and SRQ events)
//	receive token → capturer.mu               (queueBatch)
//
// Outside rxe, verbs.CompChannel's lock is taken under QP.mu (CQ.push
// notifies the channel), and socket calls are made under a lane mutex
// (sends) or the receive token (receives).
//
// CQ.mu, SRQ.mu, Device.mu, Device.evMu, capturer.mu, sportTable.mu
// and, in -race builds only, raceMem (racemem_race.go: every copy into or
// out of registered memory) are leaves: nothing is locked under them (CQ.push and SRQ.take
// release their mutex before raising an event). Nothing takes
// Device.defMu or the receive token with QP.mu held: a round that
// defers its responses lists the QP (addDeferred) after releasing
// QP.mu, and CQ.Poll, which may take the token, is never called under
// QP.mu (completion handlers run after it is released). A lane mutex
// never waits for QP.mu: a goroutine that still holds a lane after
// releasing QP.mu sends and releases the lane before it locks QP.mu
// again.
//
// # Scheduling invariants
//
//  1. One round at a time. A QP's processing round (QP.process: the
//     inbound packets through handle, the requester, completions, the
//     timer) runs only with QP.mu held, by whichever goroutine holds it:
//     the poster (PostSend → afterPost), the receive-token holder
//     (runInline, which uses TryLock and never waits for a busy QP), or
//     the QP's run loop (QP.loop). Modify, Drain, PostRecv, Query and
//     Destroy hold QP.mu but run no round. After destroy sets dead no
//     round runs.
//  2. Kicks are never lost. kickC has capacity 1 (rxe's ARMED): a kick
//     that finds one pending is dropped, since the pending one will run a
//     round that sees everything queued before it. Whoever leaves work
//     behind kicks: runInline when TryLock fails (after enqueueing), a
//     round that ran out of budget or found new inbound packets at its
//     end (process reports more), Modify on a state change. A timer only
//     kicks the loop's select; a round tests every deadline
//     (checkTimers) and re-arms lazily (armTimer), so spurious and early
//     wakeups are harmless.
//  3. Per-QP order. Only a shard's receive-token holder reads the
//     shard's socket and it queues a batch's packets (queueBatch) before
//     any of them is processed, so the packets that arrive through one
//     shard reach a QP's inbound ring in arrival order (shard.go states
//     what holds when one QP's packets arrive through two shards). Packets
//     are built under QP.mu in PSN order into a lane's cur batch; take
//     hands the batch to the lane's out under QP.mu and the lane mutex,
//     and the next take waits for that mutex until the batch is sent, so
//     each lane reaches the socket in build order. The two lanes
//     (requests; ACKs and responses) are independent PSN streams.
//  4. Roles. The requester, responder and completer are touched only
//     under QP.mu, and a role's fields are written only by its own
//     methods; the cross-role calls are named after their event
//     (completer.onRequestSent, requester.rewind, pauseUntil, credits,
//     onRetired). The send queue is shared: PostSend fills its tail, the
//     requester walks it at requester.pos, the completer retires its
//     head; the receive queue is filled by PostRecv and emptied by the
//     responder.
//  5. Completions. They are pushed under QP.mu (pushCQ), in WQE order
//     for each queue: completer.completeSends retires the SQ head only,
//     the responder completes receives in message order. A push that
//     fires the completion channel notifies it at once (still under
//     QP.mu); a CQ handler that is due runs after QP.mu is released, on
//     the goroutine whose round pushed the completion, before that
//     round's responses are sent (unlockAndSend), never concurrently
//     with itself (CQ.hrun).
//  6. Responses. A round's positive ACKs merge into one, built at its
//     end (responder.flushAck) before its responses are taken; what the
//     round then sends at once and what waits for the application's
//     reply is the ACK policy (sched.go: holdFor, unlockAndSend). A
//     held response waits for one event at most (the handlers' return,
//     a yield, or the poller's next post, empty Poll or ReqNotify) and
//     never longer than respDeferMax, which the QP timer enforces.
//     Requests are never held.
//  7. Received packets. A receive batch slot's packet is lent to its QP
//     (packet.loan, device.go) and is the QP's until releaseRx; the slot
//     reads into it again only after reclaim took it back, else it reads
//     into a new one. The compare-and-swaps on loan, not a mutex, decide
//     which side owns a lent packet.
