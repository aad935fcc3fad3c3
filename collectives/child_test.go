package collectives

const childEnv = "COLLECTIVES_TEST_CHILD"

func childMain() int { return 0 }
