//! The supervisor's and the worker's Landlock ABI probes (two copies of one
//! read-only query, see `reference-parent/src/process_host/landlock_abi.rs`)
//! give the same answer on this kernel (DESIGN §16.6, §18.3).

#[test]
fn the_supervisor_and_the_worker_probe_the_same_landlock_abi() {
    let parent = quirl_lua_reference_parent::process_host::landlock_kernel_abi();
    let worker = quirl_lua_reference_worker::lockdown::landlock::kernel_abi();
    assert_eq!(parent, worker);
    match parent {
        Ok(version) => assert!(version >= 1, "ABI version {version}"),
        Err(reason) => eprintln!("no Landlock here: {reason}"),
    }
}
