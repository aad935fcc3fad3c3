package verbs

import "syscall"

// RCTransition is the kernel's rule (ib_modify_qp_is_ok, from the IB
// specification's QP state table) for an RC QP's Modify from state from to
// state to: whether the transition exists, the attributes it requires and
// those it allows beside them (QPAttrState aside). A Modify without
// QPAttrState is the transition from the current state to itself. Every
// provider refuses with EINVAL a mask that lacks a required attribute or
// has one that is neither required nor allowed: a program written against
// one provider sets the same attributes on any other.
//
// The transitions a QP from PD.CreateQP takes, with what they need:
//
//	RESET -> INIT: PKeyIndex, PortNum, AccessFlags
//	INIT  -> RTR:  AH, PathMTU, DestQPNum, RQPSN, MaxDestRdAtomic, MinRNRTimer
//	               (AccessFlags, PKeyIndex allowed)
//	RTR   -> RTS:  Timeout, RetryCnt, RNRRetry, SQPSN, MaxRdAtomic
//	               (AccessFlags, MinRNRTimer allowed)
//	any   -> ERR, any -> RESET (but RESET -> ERR): nothing
func RCTransition(from, to QPState) (valid bool, required, allowed QPAttrMask) {
	const (
		initAttrs = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
		rtrAttrs  = QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
		rtsAttrs  = QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxRdAtomic
		// What an RTS QP may change (alternate paths and migration
		// state aside, which this package does not model).
		rtsOpt = QPAttrAccessFlags | QPAttrMinRNRTimer
		sqdOpt = QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxRdAtomic |
			QPAttrMaxDestRdAtomic | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer
	)
	if from < QPSReset || from > QPSErr || to < QPSReset || to > QPSErr {
		return false, 0, 0
	}
	if to == QPSReset {
		return true, 0, 0
	}
	if to == QPSErr {
		return from != QPSReset, 0, 0
	}
	switch from {
	case QPSReset:
		if to == QPSInit {
			return true, initAttrs, 0
		}
	case QPSInit:
		switch to {
		case QPSInit:
			return true, 0, initAttrs
		case QPSRTR:
			return true, rtrAttrs, QPAttrAccessFlags | QPAttrPKeyIndex
		}
	case QPSRTR:
		if to == QPSRTS {
			return true, rtsAttrs, rtsOpt
		}
	case QPSRTS:
		switch to {
		case QPSRTS:
			return true, 0, rtsOpt
		case QPSSQD:
			return true, 0, 0
		}
	case QPSSQD:
		switch to {
		case QPSRTS:
			return true, 0, rtsOpt
		case QPSSQD:
			return true, 0, sqdOpt
		}
	case QPSSQE:
		if to == QPSRTS {
			return true, 0, 0
		}
	}
	return false, 0, 0
}

// CheckRCModify applies RCTransition to a Modify of a QP in state cur:
// nil if the kernel would take the mask, else an EINVAL *Error that says
// what is missing or extra. Providers that check before the device does
// (soft) use it; it is exported so that programs can check a mask too.
func CheckRCModify(cur QPState, attr *QPAttr, mask QPAttrMask) error {
	const op = "ibv_modify_qp"
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
	}
	valid, req, opt := RCTransition(cur, next)
	if !valid {
		return Errorf(op, syscall.EINVAL, "no transition %v -> %v", cur, next)
	}
	if missing := req &^ mask; missing != 0 {
		return Errorf(op, syscall.EINVAL, "%v -> %v requires %v", cur, next, missing)
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return Errorf(op, syscall.EINVAL, "%v -> %v does not take %v", cur, next, extra)
	}
	return nil
}

var qpAttrMaskNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS", 4: "PKEY_INDEX", 5: "PORT",
	6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT", 10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC", 14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN",
}

// String names the mask's bits as libibverbs' IBV_QP_* constants do.
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	s := ""
	for i := 0; i < 32; i++ {
		if m&(1<<i) == 0 {
			continue
		}
		if s != "" {
			s += "|"
		}
		if i < len(qpAttrMaskNames) && qpAttrMaskNames[i] != "" {
			s += qpAttrMaskNames[i]
		} else {
			s += "BIT" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		}
	}
	return s
}
