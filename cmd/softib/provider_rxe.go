package main

// The Soft-RoCE provider backs every device the tools open.
import _ "softib/rxe"
