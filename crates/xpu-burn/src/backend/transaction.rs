//! burn's `TransactionOps` on xpu: burn's default (each read in turn; every read waits for
//! the same stream, so the first one waits for the work of all).

use burn_tensor::ops::TransactionOps;

use crate::Xpu;

impl TransactionOps<Self> for Xpu {}
