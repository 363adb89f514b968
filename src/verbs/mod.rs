//! The only module with `unsafe`: RDMA verbs through `sideway`.
#![allow(unsafe_code)]
