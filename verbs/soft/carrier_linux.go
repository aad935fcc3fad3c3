package soft

func (*shmTransport) carrier() string { return "shm" }
