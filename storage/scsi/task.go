package scsi

import "sync"

// TMFResponse is the outcome of a task management function, named as
// SAM-5 names service responses.
type TMFResponse uint8

// Task management outcomes.
const (
	TMFComplete TMFResponse = iota
	TMFTaskNotFound
	TMFLUNNotFound
	TMFNotSupported
	TMFRejected
)

type taskKey struct {
	nexus any
	lun   uint64
	tag   uint64
}

// Task is a command in the task set of a logical unit, from its arrival
// until its transport sent the response (or learnt it was aborted).
type Task struct {
	key     taskKey
	mu      sync.Mutex
	aborted bool
	done    chan struct{}
}

// Aborted reports whether a task management function aborted the task:
// its transport must then send no response for it (SAM-5 §7.2).
func (t *Task) Aborted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborted
}

type taskSet struct {
	mu sync.Mutex
	m  map[taskKey]*Task
}

// Begin enters a task in the task set for nexus (the transport's I_T
// nexus: a session or channel), lun and tag; ok is false when the nexus
// already has a task with that tag on that LUN (an overlapped command).
func (t *Target) Begin(nexus any, lun, tag uint64) (task *Task, ok bool) {
	k := taskKey{nexus, lun, tag}
	t.tasks.mu.Lock()
	defer t.tasks.mu.Unlock()
	if _, dup := t.tasks.m[k]; dup {
		return nil, false
	}
	task = &Task{key: k, done: make(chan struct{})}
	t.tasks.m[k] = task
	return task, true
}

// End removes task from the task set once its response went out (or it
// was aborted), releasing task management functions waiting for it.
func (t *Target) End(task *Task) {
	t.tasks.mu.Lock()
	if t.tasks.m[task.key] == task {
		delete(t.tasks.m, task.key)
	}
	t.tasks.mu.Unlock()
	close(task.done)
}

// AbortTask aborts the task with tag on lun of nexus (ABORT TASK). It
// returns at once; the transport answers the function when done is
// closed, which happens once the task ended.
func (t *Target) AbortTask(nexus any, lun, tag uint64) (r TMFResponse, done <-chan struct{}) {
	t.tasks.mu.Lock()
	task := t.tasks.m[taskKey{nexus, lun, tag}]
	t.tasks.mu.Unlock()
	if task == nil {
		return TMFTaskNotFound, closed
	}
	t.Stats.Aborts.Add(1)
	task.mu.Lock()
	task.aborted = true
	task.mu.Unlock()
	return TMFComplete, task.done
}

// ResetLUN aborts every task on lun of every nexus (LOGICAL UNIT
// RESET); done is closed once they all ended.
func (t *Target) ResetLUN(lun uint64) (r TMFResponse, done <-chan struct{}) {
	if t.LUN(lun) == nil {
		return TMFLUNNotFound, closed
	}
	t.Stats.Resets.Add(1)
	var wait []*Task
	t.tasks.mu.Lock()
	for k, task := range t.tasks.m {
		if k.lun == lun {
			wait = append(wait, task)
		}
	}
	t.tasks.mu.Unlock()
	return TMFComplete, abortAll(wait)
}

// AbortNexus aborts every task of nexus (ABORT TASK SET, or the nexus
// went away); done is closed once they all ended.
func (t *Target) AbortNexus(nexus any) <-chan struct{} {
	var wait []*Task
	t.tasks.mu.Lock()
	for k, task := range t.tasks.m {
		if k.nexus == nexus {
			wait = append(wait, task)
		}
	}
	t.tasks.mu.Unlock()
	return abortAll(wait)
}

func abortAll(tasks []*Task) <-chan struct{} {
	if len(tasks) == 0 {
		return closed
	}
	for _, task := range tasks {
		task.mu.Lock()
		task.aborted = true
		task.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		for _, task := range tasks {
			<-task.done
		}
		close(done)
	}()
	return done
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
