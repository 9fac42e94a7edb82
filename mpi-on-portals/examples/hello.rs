//! Every rank says hello. `ptlrun -n 4 target/release/examples/hello`

use mpi_on_portals::traits::*;

fn main() -> mpi_on_portals::Result<()> {
    let universe = mpi_on_portals::initialize()?;
    let world = universe.world();
    println!(
        "hello from rank {} of {} (pid {}, {} NAL)",
        world.rank(),
        world.size(),
        std::process::id(),
        universe.network_interface().nal_name()
    );
    Ok(())
}
