//! Persistent Domain state: the Domain Store (`domain.redb`), the Domain
//! Root's layout, and the State Anchors (FR-4, FR-11, OR-5, SR-14).
//!
//! A State Anchor is a Domain-scoped overlay upper for one persistent
//! sandbox path (`/usr`, `/etc`, ...), with the prepared image as its
//! read-only lower. Each anchor has a generation; a reset switches it to a
//! new empty generation through a durable intent in the Domain Store and an
//! atomic rename, so an interrupted reset recovers to the prior generation
//! or the new empty one, never a half-reset upper.
//!
//! Every file operation here goes through [`beneath::Root`], which resolves
//! paths beneath the Domain Root and follows no symlink.

pub mod anchors;
pub mod beneath;
pub mod layout;
pub mod meta;
pub mod remove;
pub mod scan;
pub mod store;

pub use layout::DomainLayout;
