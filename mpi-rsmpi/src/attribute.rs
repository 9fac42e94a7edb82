//! Attributes cached on communicators (rsmpi's `mpi::attribute`, MPI 4.1
//! §7.7): one value per attribute type and communicator.
//!
//! The values live in the face's communicator value itself, not in a
//! library-wide table: a communicator is one Rust value here, and the world
//! communicator from each [`Universe::world`](crate::environment::Universe::world)
//! call starts with none. Unlike rsmpi, attributes must be `Send + Sync`,
//! so that communicators stay so.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;

use crate::topology::Communicator;

/// The traits to bring into scope for attributes.
pub mod traits {
    pub use super::{AnyCommunicator, CommAttribute};
}

/// A type whose values can be cached on a communicator.
pub trait CommAttribute: 'static + Sized + Clone + Send + Sync {
    /// Whether a duplicate of the communicator gets a clone of the value
    /// (`MPI_Comm_dup`'s copy callback); by default it gets none.
    const CLONE_ON_DUP: bool = false;
}

/// A cached value, of any attribute type.
type Value = Box<dyn Any + Send + Sync>;

struct Slot {
    value: Value,
    /// How a duplicate gets its copy (`CLONE_ON_DUP`), if it does.
    clone: Option<fn(&(dyn Any + Send + Sync)) -> Value>,
}

/// The attributes of one communicator.
#[derive(Default)]
pub(crate) struct Attributes(HashMap<TypeId, Slot>);

impl fmt::Debug for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Attributes({})", self.0.len())
    }
}

fn clone_as<A: CommAttribute>(v: &(dyn Any + Send + Sync)) -> Value {
    match v.downcast_ref::<A>() {
        Some(a) => Box::new(a.clone()),
        // A slot of type A holds an A (it is keyed by A's TypeId).
        None => unreachable!("attribute slot of another type"),
    }
}

impl Attributes {
    /// What a duplicate of the communicator gets.
    pub(crate) fn duplicate(&self) -> Attributes {
        Attributes(
            self.0
                .iter()
                .filter_map(|(k, s)| {
                    let clone = s.clone?;
                    Some((
                        *k,
                        Slot {
                            value: clone(&*s.value),
                            clone: s.clone,
                        },
                    ))
                })
                .collect(),
        )
    }
}

/// Attribute access on any communicator (rsmpi's `AnyCommunicator`).
pub trait AnyCommunicator {
    /// The value of attribute type `A` (`MPI_Comm_get_attr`).
    fn get_attr<A: CommAttribute>(&self) -> Option<&A>;
    /// Set the value of attribute type `A`, dropping the one before
    /// (`MPI_Comm_set_attr`).
    fn set_attr<A: CommAttribute>(&mut self, val: A);
    /// Remove the value of attribute type `A` (`MPI_Comm_delete_attr`).
    fn delete_attr<A: CommAttribute>(&mut self) -> Option<A>;
}

impl<C: Communicator + ?Sized> AnyCommunicator for C {
    fn get_attr<A: CommAttribute>(&self) -> Option<&A> {
        self.target()
            .attributes()
            .0
            .get(&TypeId::of::<A>())?
            .value
            .downcast_ref()
    }

    fn set_attr<A: CommAttribute>(&mut self, val: A) {
        let slot = Slot {
            value: Box::new(val),
            clone: A::CLONE_ON_DUP.then_some(clone_as::<A> as _),
        };
        self.target_mut()
            .attributes_mut()
            .0
            .insert(TypeId::of::<A>(), slot);
    }

    fn delete_attr<A: CommAttribute>(&mut self) -> Option<A> {
        let slot = self
            .target_mut()
            .attributes_mut()
            .0
            .remove(&TypeId::of::<A>())?;
        slot.value.downcast().ok().map(|b| *b)
    }
}
